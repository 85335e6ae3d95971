"""Multi30k EN-DE (or EN-FR): a small real translation task that trains on a CPU.

Prepares the text as Wu et al. (2021) do (lower-cased, Moses-tokenized; `--cased` and
`--no-moses` turn either off), trains the recipe of configs/multi30k.yaml (their
"Transformer-tiny" and schedule) on the 29000 Multi30k training pairs with dev loss and
perplexity on `val`, then translates test_2016_flickr with the averaged model (beam 4, alpha
0.6), detokenizes, and prints sacreBLEU (with its signature: case-insensitive for a
lower-cased model), chrF, and the lower-cased Moses-tokenized word BLEU that the Multi30k
papers report (41.02 for Wu et al.'s model), ending with one JSON line. Data:
`$KT_DATA_DIR/multi30k` or `--data-dir`. Running the same command again resumes from the
newest checkpoint (or, when training is done, only re-scores).

    python pipelines/multi30k.py [--data-dir DIR] [--target de|fr] [--output-dir DIR]
                                 [--train-steps N] [--test-set SPLIT] [--cased] [--no-moses]
                                 [--precision float32|mixed_bfloat16] [--set KEY=VALUE ...]
    python pipelines/multi30k.py --data-only

`--set` overrides any key of the config (dotted), e.g. `--set model.num_layers=6`.
`--data-only` prepares the text where configs/multi30k.yaml expects it and stops, so that
`keras-transformer train --config configs/multi30k.yaml` can train it. On 2 CPU cores the
recipe takes hours; `--precision mixed_bfloat16` on a CPU with AVX512-BF16 is the fastest way
(docs/decisions.md#multi30k-mixed-bfloat16).
"""

import argparse
import json
import os
import sys

from keras_transformer.cli.startup import (  # noqa: E402  (before TensorFlow is imported)
    VERBOSE_FLAG,
    VERBOSE_HELP,
    import_tensorflow_quietly,
    quiet_tensorflow,
)

import_tensorflow_quietly(quiet_tensorflow(sys.argv))

from keras_transformer.errors import UserInputError  # noqa: E402
from keras_transformer.training import TrainingConfig, make_strategy, train  # noqa: E402

CONFIG = os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs", "multi30k.yaml")
)


def multi30k_config(
    data_dir,
    target="de",
    output_dir=None,
    train_steps=None,
    extension=".gz",
    precision=None,
    replicas=1,
    overrides=(),
    config_file=CONFIG,
):
    """The recipe (`config_file`) as a `TrainingConfig`, training on the text in `data_dir`.

    `data_dir` holds `{train,val}.{en,TARGET}EXTENSION`: the Multi30k folder itself, or the
    folder `prepare_corpus` writes. `output_dir`, `train_steps`, `precision`: None keeps the
    file's. `replicas`: the devices training runs on (`main` gives the replicas of the "auto"
    strategy: every GPU, or one device); each gets an equal share of an update's tokens.
    `overrides`: `KEY=VALUE` strings applied last (`--set`)."""
    from keras_transformer.training.config_reading import read_config_file

    def files(split):
        return {
            "source": os.path.join(data_dir, f"{split}.en{extension}"),
            "target": os.path.join(data_dir, f"{split}.{target}{extension}"),
        }

    changes = {"data.train": [files("train")], "data.dev": files("val")}
    if output_dir is not None:
        changes["output_dir"] = output_dir
    if train_steps is not None:
        changes["schedule.train_steps"] = train_steps
    if precision is not None:
        changes["precision"] = precision
    if replicas > 1:
        changes["data.token_budget"] = (
            read_config_file(config_file)["data"]["token_budget"] // replicas
        )
    return TrainingConfig.from_file(config_file, overrides, changes)


def default_output_dir(target, config_file=CONFIG):
    """The file's run folder for EN-DE; `runs/multi30k_en_TARGET` for another target."""
    from keras_transformer.training.config_reading import read_config_file

    return (
        read_config_file(config_file)["output_dir"]
        if target == "de"
        else f"runs/multi30k_en_{target}"
    )


class Preprocessing:
    """Wu et al.'s text preparation: lower-case and/or Moses-tokenize (sacremoses, no
    escaping) before BPE; `postprocess` turns model output back into plain text.

    Training on lower-cased text spends none of a tiny model's capacity on case, and the
    Multi30k papers score lower-cased text anyway; the price is lower-cased output.
    """

    def __init__(self, lowercase, moses, language):
        self.lowercase, self.moses, self.language = lowercase, moses, language
        if moses:
            from sacremoses import MosesDetokenizer, MosesTokenizer

            self._tokenizers = {}
            self._tokenizer_class = MosesTokenizer
            self._detokenizer = MosesDetokenizer(lang=language)

    @property
    def name(self):
        steps = (["lowercase"] if self.lowercase else []) + (["moses"] if self.moses else [])
        return "+".join(steps) or "none"

    def __call__(self, text, language):
        if self.lowercase:
            text = text.lower()
        if self.moses:
            if language not in self._tokenizers:
                self._tokenizers[language] = self._tokenizer_class(lang=language)
            text = self._tokenizers[language].tokenize(text, return_str=True, escape=False)
        return text

    def postprocess(self, text):
        if self.moses:
            return self._detokenizer.detokenize(text.split(), unescape=False)
        return text


def prepare_corpus(data_dir, output_dir, target, preprocessing):
    """Writes the preprocessed train and val splits to `OUTPUT/data/` (once: a re-run reuses
    them) and returns that folder. A run folder prepared differently is refused, so a resumed
    run never mixes two preparations."""
    from keras_transformer.files import atomic_write

    folder = os.path.join(output_dir, "data")
    stamp = os.path.join(folder, "PREPROCESSING")
    if os.path.exists(stamp):
        with open(stamp) as file:
            done = file.read().strip()
        if done != preprocessing.name:
            raise UserInputError(
                f"{output_dir} was prepared with preprocessing {done!r}, not "
                f"{preprocessing.name!r}; give another --output-dir, or the options it was "
                "trained with"
            )
        return folder
    os.makedirs(folder, exist_ok=True)
    for split in ("train", "val"):
        for language in ("en", target):
            lines = _read_lines(os.path.join(data_dir, f"{split}.{language}.gz"))
            with atomic_write(os.path.join(folder, f"{split}.{language}.txt")) as file:
                file.writelines(preprocessing(line, language) + "\n" for line in lines)
    with atomic_write(stamp) as file:
        file.write(preprocessing.name + "\n")
    return folder


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(VERBOSE_FLAG, action="store_true", help=VERBOSE_HELP)
    parser.add_argument(
        "--data-dir", default=None, help="the Multi30k folder (default: $KT_DATA_DIR/multi30k)"
    )
    parser.add_argument(
        "--target", choices=["de", "fr"], default="de", help="target language (default: de)"
    )
    parser.add_argument(
        "--output-dir",
        default=None,
        help="the run folder (default: configs/multi30k.yaml's for de, runs/multi30k_en_TARGET "
        "otherwise)",
    )
    parser.add_argument(
        "--data-only",
        action="store_true",
        help="prepare the training text (as configs/multi30k.yaml expects it for de), print "
        "its paths, and stop",
    )
    parser.add_argument(
        "--train-steps", type=int, default=None, help="optimizer updates (default: the config's)"
    )
    parser.add_argument(
        "--test-set",
        default="test_2016_flickr",
        help="the split scored at the end (default: test_2016_flickr)",
    )
    parser.add_argument(
        "--test-lines",
        type=int,
        default=None,
        help="score only the first N test lines (a smoke test; default: all)",
    )
    parser.add_argument(
        "--cased",
        action="store_true",
        help="train on cased text and translate into cased text (default: "
        "lower-cased, as Wu et al.)",
    )
    parser.add_argument(
        "--no-moses",
        action="store_true",
        help="give raw text to BPE instead of Moses-tokenized text",
    )
    parser.add_argument(
        "--precision",
        choices=["float32", "mixed_bfloat16"],
        default=None,
        help="training numerics (default: the config's, float32); mixed_bfloat16 is faster on "
        "a CPU with AVX512-BF16 (docs/decisions.md#multi30k-mixed-bfloat16). Averaged weights "
        "and decoding stay float32.",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="override a TrainingConfig key (repeatable)",
    )
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)

    data_dir = args.data_dir
    if data_dir is None:
        if not os.environ.get("KT_DATA_DIR"):
            print(
                "multi30k: give --data-dir or set KT_DATA_DIR (e.g. ../shared/data)",
                file=sys.stderr,
            )
            return 2
        data_dir = os.path.join(os.environ["KT_DATA_DIR"], "multi30k")
    output_dir = args.output_dir or default_output_dir(args.target)
    preprocessing = Preprocessing(
        lowercase=not args.cased, moses=not args.no_moses, language=args.target
    )
    try:
        if preprocessing.name == "none":
            train_dir, extension = data_dir, ".gz"
        else:
            train_dir, extension = (
                prepare_corpus(data_dir, output_dir, args.target, preprocessing),
                ".txt",
            )
        if args.data_only:
            print(f"the Multi30k text ({preprocessing.name}) for training:")
            for split in ("train", "val"):
                for language in ("en", args.target):
                    print(f"  {os.path.join(train_dir, f'{split}.{language}{extension}')}")
            return 0
        config = multi30k_config(
            train_dir,
            args.target,
            output_dir,
            args.train_steps,
            extension,
            args.precision,
            replicas=make_strategy("auto").num_replicas_in_sync,
            overrides=args.overrides,
        )
        result = train(config)
        print(result.summary())
        figures = evaluate_test_set(
            config.output_dir, data_dir, args.target, args.test_set, args.test_lines, preprocessing
        )
    except UserInputError as error:
        print(f"multi30k: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(figures, sort_keys=True))
    return 0


def _read_lines(path):
    from keras_transformer.data.corpora import read_lines

    return [line.decode("utf-8") for line in read_lines(path)]


def evaluate_test_set(
    output_dir, data_dir, target="de", test_set="test_2016_flickr", lines=None, preprocessing=None
):
    """Translates the test set with the averaged model (beam 4, alpha 0.6, section 6.1) and
    scores it: sacreBLEU (with its signature; case-insensitive when the model was trained
    lower-cased), chrF, and the word-level BLEU on lower-cased Moses-tokenized text that the
    Multi30k papers report."""
    import time

    from keras_transformer import Translator
    from keras_transformer.evaluation import evaluate, moses_lowercase_bleu
    from keras_transformer.files import atomic_write

    preprocessing = preprocessing or Preprocessing(False, False, target)
    sources = _read_lines(os.path.join(data_dir, f"{test_set}.en.gz"))[:lines]
    references = _read_lines(os.path.join(data_dir, f"{test_set}.{target}.gz"))[:lines]
    translator = Translator.load(output_dir, beam_size=4, alpha=0.6, max_extra_length=50)
    start = time.perf_counter()
    hypotheses = translator.translate([preprocessing(line, "en") for line in sources])
    seconds = time.perf_counter() - start
    hypotheses = [preprocessing.postprocess(line) for line in hypotheses]
    report = evaluate(
        hypotheses, references, target_language=target, lowercase=preprocessing.lowercase
    )
    output = os.path.join(output_dir, f"{test_set}.{target}.hyp")
    with atomic_write(output) as file:  # a re-run never leaves a half-written file
        file.write("\n".join(hypotheses) + "\n")
    comparable, how = moses_lowercase_bleu(hypotheses, references, language=target)
    print(
        f"{test_set} en-{target}, {len(sources)} sentences, beam 4, alpha 0.6, "
        f"translated in {seconds:.1f} s; translations: {output}"
    )
    print(report.format())
    print(
        f"lower-cased tokenized BLEU, the Multi30k papers' figure (Wu et al. 2021, en-de: "
        f"41.02): {comparable:.2f}  [{how}]"
    )
    return {
        "pipeline": "multi30k",
        "test_set": test_set,
        "target": target,
        "bleu": round(report.bleu, 2),
        "bleu_signature": report.bleu_signature,
        "chrf": round(report.chrf, 2),
        "moses_lowercase_bleu": round(comparable, 2),
        "translate_seconds": round(seconds, 1),
        "sentences": len(sources),
        "preprocessing": preprocessing.name,
    }


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        from keras_transformer.errors import report_interrupted

        sys.exit(report_interrupted("multi30k"))
