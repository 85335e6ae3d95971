"""English constituency parsing (paper section 6.3, Table 4) on the data we have.

Reads the Penn Treebank WSJ sample (`$KT_DATA_DIR/treebank/wsj_sample.{train,dev}.trees`,
3396 / 273 gold trees) and, with `--data wsj+gum`, the GUM silver trees
(`$KT_DATA_DIR/gum/gum_const.train.trees`, 10224 parser-produced trees: the analogue of the
paper's semi-supervised corpus); preprocesses them (function tags, `-NONE-`, TOP root),
linearizes them as Vinyals et al. (2015) (`keras_transformer.parsing.linearization`), trains a
parsing vocabulary and the recipe's Transformer with `keras_transformer.training.train` (the
translation trainer: words in, bracket sequence out), parses the WSJ dev set with the
averaged model (beam 21, alpha 0.3, output length input + 300; a search constrained to
well-formed trees over the input words, `--opening-penalty` a cost per opening bracket;
`--unconstrained` repairs free outputs instead), and scores it with EVALB's COLLINS.prm rules:
prints the EVALB summary and ends with one JSON line.

The recipes, in configs/:

- ptb_wsj.yaml and ptb_wsj_gum.yaml: the paper's model, `parsing_wsj` (4 layers, d_model
  1024, vocabulary 16K) for `--data wsj` and `parsing_semi` (32K) for `--data wsj+gum`, with
  25000-token updates: for an accelerator;
- with `--cpu`, ptb_wsj_cpu.yaml and ptb_wsj_gum_cpu.yaml: a model sized for 2 CPU cores and
  at most 2 hours of training (4 layers, d_model 256; vocabularies of 2000 and 8000 pieces),
  the 2 hours on any machine, with `--precision mixed_bfloat16` on a CPU with AVX512-BF16.

The options change a recipe for one run (`--set KEY=VALUE` any key). `--data-only` prepares
the data where the recipe expects it and stops, so that `keras-transformer train --config
configs/ptb_wsj_cpu.yaml` (for example) can train it. `--phrases WEIGHT` adds every phrase of
the WSJ training trees (51236 of 2 words or more) as a training example of its own, sampled
with that weight (`trees.phrase_subtrees`; off by default: docs/decisions.md#parsing-phrases).

Outputs in the run folder (the recipe's `runs/ptb_parsing_{wsj,wsj_gum}[_cpu]`): the usual run
files, `parsing.json` (the linearization and the opening penalty), `data/` (the parallel
text and the vocabulary), `dev.parsed.trees` (the parser's trees, `XX` slots unless
`--pos-tags`; `--word-slots` trains the decoder to copy each word into its slot, and its
trees also carry `XX`), `dev.gold.trees` (preprocessed gold) and `dev.scored.trees` (the
parses with the gold POS tags put in, which EVALB needs to delete punctuation in both trees
alike; tags do not count in F1). The same command again resumes an interrupted run, or only
re-scores a finished one.

    python pipelines/ptb_parsing.py --data wsj|wsj+gum [--cpu] [--data-only] [--data-dir DIR]
        [--output-dir DIR] [--train-steps N] [--max-train-minutes M] [--decay D]
        [--phrases WEIGHT] [--gum-weight W] [--precision float32|mixed_bfloat16]
        [--pos-tags | --word-slots] [--no-closing-labels]
        [--beam-size 21] [--alpha 0.3] [--opening-penalty NATS] [--unconstrained]
        [--dev-lines N] [--set KEY=VALUE ...]
"""

import argparse
import json
import math
import os
import sys
import time

from keras_transformer.cli.startup import (  # noqa: E402  (before TensorFlow is imported)
    VERBOSE_FLAG,
    VERBOSE_HELP,
    import_tensorflow_quietly,
    quiet_tensorflow,
)

import_tensorflow_quietly(quiet_tensorflow(sys.argv))

from keras_transformer.errors import UserInputError  # noqa: E402
from keras_transformer.parsing.linearization import Linearizer  # noqa: E402

CONFIGS = os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs")
)
RECIPES = {  # (--data, --cpu) -> the recipe file
    ("wsj", False): os.path.join(CONFIGS, "ptb_wsj.yaml"),
    ("wsj+gum", False): os.path.join(CONFIGS, "ptb_wsj_gum.yaml"),
    ("wsj", True): os.path.join(CONFIGS, "ptb_wsj_cpu.yaml"),
    ("wsj+gum", True): os.path.join(CONFIGS, "ptb_wsj_gum_cpu.yaml"),
}
# Pieces of the parsing vocabulary that `prepare_corpus` trains (the recipes' `data.vocab`).
VOCAB_SIZE = {"wsj": 16000, "wsj+gum": 32000}  # the paper's 16K and 32K
CPU_VOCAB_SIZE = {"wsj": 2000, "wsj+gum": 8000}  # docs/decisions.md#parsing-cpu-vocab-size


def prepare_corpus(data_dir, output_dir, data, linearizer, vocab_size, phrases=False):
    """Writes the parallel text and the vocabulary under `OUTPUT/data/` (once: a re-run reuses
    them; a run folder prepared otherwise is refused) and `OUTPUT/parsing.json`.

    `phrases`: also a `wsj_phrases` corpus, every phrase of the WSJ training trees as an
    example of its own (`trees.phrase_subtrees`).

    Returns:
        A dict: `train` (list of (source, target) paths), `train_names` (their corpora:
        `wsj`, `gum`, `wsj_phrases`), `dev` (source, target), `vocab` (the .model path),
        `dev_trees` (the preprocessed gold dev trees).
    """
    from keras_transformer.files import atomic_write
    from keras_transformer.parsing.corpus import train_parsing_vocabulary, write_parallel
    from keras_transformer.parsing.parser import write_parsing_settings
    from keras_transformer.parsing.trees import phrase_subtrees, read_preprocessed

    folder = os.path.join(output_dir, "data")
    stamp_path = os.path.join(folder, "PREPARATION.json")
    stamp = {"data": data, "linearizer": linearizer.to_dict(), "vocab_size": vocab_size}
    if phrases:  # only when on: folders prepared before the option existed still match
        stamp["phrases"] = True
    sources = {
        "wsj": ("treebank/wsj_sample.train.trees", "treebank/wsj_sample.dev.trees"),
        "gum": ("gum/gum_const.train.trees", None),
    }
    names = ["wsj"] + (["gum"] if data == "wsj+gum" else [])
    names += ["wsj_phrases"] if phrases else []
    dev_trees = read_preprocessed(os.path.join(data_dir, sources["wsj"][1]))
    paths = {
        "train": [os.path.join(folder, f"{name}.train") for name in names],
        "dev": os.path.join(folder, "wsj.dev"),
        "vocab": os.path.join(folder, "parsing_vocab.model"),
    }
    if os.path.exists(stamp_path):
        with open(stamp_path, encoding="utf-8") as file:
            done = json.load(file)
        # Through from_dict: a folder prepared before a linearizer option existed has the
        # option's default.
        done["linearizer"] = Linearizer.from_dict(done.get("linearizer", {})).to_dict()
        if done != stamp:
            raise UserInputError(
                f"{output_dir} was prepared with {done}, not {stamp}; give "
                "another --output-dir, or the options it was trained with"
            )
    else:
        os.makedirs(folder, exist_ok=True)
        corpora = {}
        for name, prefix in zip(names, paths["train"]):
            if name == "wsj_phrases":  # from the WSJ trees read just before
                corpora[name] = [
                    phrase for tree in corpora["wsj"] for phrase in phrase_subtrees(tree)
                ]
            else:
                corpora[name] = read_preprocessed(os.path.join(data_dir, sources[name][0]))
            write_parallel(corpora[name], linearizer, prefix)
        write_parallel(dev_trees, linearizer, paths["dev"])
        _, size = train_parsing_vocabulary(
            [p + ".words" for p in paths["train"]],
            [p + ".trees.lin" for p in paths["train"]],
            paths["vocab"],
            vocab_size,
            word_slots=linearizer.word_slots,
        )
        print(f"parsing vocabulary: {size} pieces ({paths['vocab']})")
        write_parsing_settings(output_dir, linearizer)
        with atomic_write(stamp_path) as file:
            json.dump(stamp, file, indent=2, sort_keys=True)
    return {
        "train": [(p + ".words", p + ".trees.lin") for p in paths["train"]],
        "train_names": names,
        "dev": (paths["dev"] + ".words", paths["dev"] + ".trees.lin"),
        "vocab": paths["vocab"],
        "dev_trees": dev_trees,
    }


def parsing_config(
    corpus,
    output_dir=None,
    data="wsj",
    cpu=False,
    train_steps=None,
    gum_weight=None,
    precision=None,
    phrase_weight=1.0,
    max_train_minutes="recipe",
    decay=None,
    overrides=(),
):
    """The recipe (`RECIPES[data, cpu]`) as a `TrainingConfig`, training on `corpus` (what
    `prepare_corpus` returns).

    Sampling weights: WSJ the recipe's, GUM `gum_weight` (None: the recipe's), the WSJ phrases
    `phrase_weight`. `output_dir`, `train_steps`, `precision`, `decay`: None keeps the
    recipe's; `max_train_minutes`: "recipe" keeps the recipe's, None is no limit.
    `overrides`: `KEY=VALUE` strings applied last (`--set`).
    """
    from keras_transformer.training import TrainingConfig
    from keras_transformer.training.config_reading import read_config_file

    recipe = RECIPES[data, cpu]
    recipe_weights = [c.get("weight", 1.0) for c in read_config_file(recipe)["data"]["train"]]
    weights = {"wsj": 1.0, "gum": 1.0, **dict(zip(["wsj", "gum"], recipe_weights))}
    weights["wsj_phrases"] = phrase_weight
    if gum_weight is not None:
        weights["gum"] = gum_weight
    changes = {
        "data.train": [
            {"source": s, "target": t, "weight": weights[name]}
            for name, (s, t) in zip(corpus["train_names"], corpus["train"])
        ],
        "data.dev": {"source": corpus["dev"][0], "target": corpus["dev"][1]},
        "data.vocab": corpus["vocab"],
    }
    for key, value in (
        ("output_dir", output_dir),
        ("schedule.train_steps", train_steps),
        ("schedule.decay", decay),
        ("precision", precision),
    ):
        if value is not None:
            changes[key] = value
    if max_train_minutes != "recipe":
        changes["schedule.max_train_minutes"] = max_train_minutes
    return TrainingConfig.from_file(recipe, overrides, changes)


def score_parses(gold, parsed):
    """EVALB (COLLINS.prm) on the dev parses: `(report, scored trees, figures)`.

    XX slots carry no tags: the gold tags go in for EVALB, which deletes punctuation by each
    tree's own tags (F1 counts no tags). Predicted POS slots are scored as they are, and
    `figures["gold_tags"]` adds the same parses scored with the gold tags in: there every
    mistagged punctuation mark makes an error sentence (most of the dev set, for a small
    model), and the gold tags give the bracket F1 over every sentence, comparable with XX
    and word slots.
    """
    from keras_transformer.parsing.evalb import evaluate, with_gold_tags

    gold_lines = [str(tree) for tree in gold]
    scored, filled = with_gold_tags(gold, parsed)
    report = evaluate(gold_lines, [str(tree) for tree in scored], tags_predicted=not filled)
    figures = {}
    if not filled:
        with_gold, _ = with_gold_tags(gold, parsed, replace_predicted=True)
        comparable = evaluate(
            gold_lines, [str(tree) for tree in with_gold], tags_predicted=False
        ).all
        figures["gold_tags"] = {
            "f1": round(comparable.f1, 2),
            "precision": round(comparable.precision, 2),
            "recall": round(comparable.recall, 2),
            "error_sentences": comparable.error_sentences,
        }
    return report, scored, figures


def evaluate_dev(
    output_dir,
    dev_trees,
    linearizer,
    beam_size=21,
    alpha=0.3,
    max_extra_length=300,
    lines=None,
    batch_size=32,
    constrained=True,
    opening_penalty=0.0,
):
    """Parses the dev set with the averaged model and scores it (EVALB, COLLINS.prm).

    The opening penalty used goes into the run's `parsing.json`, so that `parse(model=RUN)`
    and `keras-transformer parse --model RUN` search as this dev parse did.

    Returns:
        `(report, figures)`: the `EvalbReport` and a dict of the headline figures.
    """
    from keras_transformer.files import atomic_write
    from keras_transformer.parsing.parser import Parser, write_parsing_settings

    gold = dev_trees[:lines]
    if not constrained:
        opening_penalty = 0.0  # the free search has no constrained step to apply it in
    parser = Parser.load(
        output_dir,
        beam_size=beam_size,
        alpha=alpha,
        max_extra_length=max_extra_length,
        linearizer=linearizer,
        batch_size=batch_size,
        constrained=constrained,
        opening_penalty=opening_penalty,
    )
    write_parsing_settings(output_dir, linearizer, opening_penalty)
    start = time.perf_counter()
    parsed = parser.parse([tree.leaves() for tree in gold])
    seconds = time.perf_counter() - start
    report, scored, figures = score_parses(gold, parsed)
    for name, trees in (
        ("dev.parsed.trees", parsed),
        ("dev.scored.trees", scored),
        ("dev.gold.trees", gold),
    ):
        with atomic_write(os.path.join(output_dir, name)) as file:
            file.writelines(str(tree) + "\n" for tree in trees)
    figures.update(
        {
            "sentences": len(gold),
            "parse_seconds": round(seconds, 1),
            "sentences_per_second": round(len(gold) / max(seconds, 1e-9), 2),
            "repaired": parser.last_repaired,
            "repairs": dict(parser.last_repairs),
            "beam_size": beam_size,
            "alpha": alpha,
            "max_extra_length": max_extra_length,
            "constrained": constrained,
            "opening_penalty": opening_penalty,
        }
    )
    return report, figures


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(VERBOSE_FLAG, action="store_true", help=VERBOSE_HELP)
    parser.add_argument(
        "--data",
        choices=["wsj", "wsj+gum"],
        default="wsj",
        help="wsj: the gold WSJ sample only; wsj+gum: plus the GUM silver "
        "trees (the semi-supervised analogue)",
    )
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="the recipe sized for 2 CPU cores and 2 hours, the 2 hours with "
        "--precision mixed_bfloat16 on a CPU with AVX512-BF16 (configs/ptb_*_cpu.yaml; "
        "default: the paper's parsing_wsj / parsing_semi, configs/ptb_wsj.yaml and "
        "ptb_wsj_gum.yaml)",
    )
    parser.add_argument(
        "--data-only",
        action="store_true",
        help="prepare the linearized trees and the vocabulary where the recipe expects "
        "them (or under --output-dir), print their paths, and stop",
    )
    parser.add_argument(
        "--data-dir", default=None, help="the shared data folder (default: $KT_DATA_DIR)"
    )
    parser.add_argument("--output-dir", default=None, help="the run folder (default: the recipe's)")
    parser.add_argument(
        "--train-steps",
        type=int,
        default=None,
        help="optimizer updates (default: the recipe's)",
    )
    parser.add_argument(
        "--max-train-minutes",
        type=float,
        default=None,
        metavar="MINUTES",
        help="stop training after this many minutes (over all starts of the "
        "run), at whatever step it reached, and go on to averaging and "
        "parsing (default: the recipe's, 120 with --cpu, otherwise none; 0: none)",
    )
    parser.add_argument(
        "--decay",
        choices=["rsqrt", "linear"],
        default=None,
        help="the learning rate after the warmup: the paper's inverse square "
        "root, or linearly to 0 at the last update or the time limit "
        "(default: the recipe's, linear with --cpu, otherwise rsqrt)",
    )
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=None,
        help=f"vocabulary pieces (default: {VOCAB_SIZE['wsj']} wsj, "
        f"{VOCAB_SIZE['wsj+gum']} wsj+gum; --cpu {CPU_VOCAB_SIZE['wsj']} wsj, "
        f"{CPU_VOCAB_SIZE['wsj+gum']} wsj+gum)",
    )
    parser.add_argument(
        "--gum-weight",
        type=float,
        default=None,
        help="sampling weight of the GUM trees against WSJ's (default: the recipe's, 1.0)",
    )
    parser.add_argument(
        "--phrases",
        type=float,
        default=0.0,
        metavar="WEIGHT",
        help="also train on every phrase of the WSJ training trees as an "
        "example of its own, sampled with this weight against WSJ's 1.0 "
        "(gold data only; default 0: off)",
    )
    parser.add_argument(
        "--pos-tags",
        action="store_true",
        help="word slots are POS tags (default: XX, as Vinyals et al.)",
    )
    parser.add_argument(
        "--word-slots",
        action="store_true",
        help="word slots are the words themselves, copied by the decoder "
        "(default: XX, as Vinyals et al.)",
    )
    parser.add_argument(
        "--no-closing-labels",
        action="store_true",
        help="close constituents with a bare ')' (default: ')NP')",
    )
    parser.add_argument("--beam-size", type=int, default=21, help="default: 21 (paper 6.3)")
    parser.add_argument("--alpha", type=float, default=0.3, help="default: 0.3 (paper 6.3)")
    parser.add_argument(
        "--max-extra-length",
        type=int,
        default=300,
        help="output length cap = input + this; default: 300 (paper 6.3)",
    )
    parser.add_argument(
        "--unconstrained",
        action="store_true",
        help="search freely and repair malformed outputs afterwards, as "
        "Vinyals et al. (default: search only well-formed trees over "
        "the input words)",
    )
    parser.add_argument(
        "--opening-penalty",
        type=float,
        default=0.0,
        metavar="NATS",
        help="subtracted from each opening bracket's log-probability in the "
        "constrained search, for a model that over-brackets (default: 0; "
        "recorded in parsing.json for parse)",
    )
    parser.add_argument(
        "--dev-lines",
        type=int,
        default=None,
        help="parse only the first N dev trees (a smoke test; default: all)",
    )
    parser.add_argument(
        "--precision",
        choices=["float32", "mixed_bfloat16"],
        default=None,
        help="training numerics (default: the recipe's, float32)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="override a key of the recipe (repeatable)",
    )
    return parser


def option_problem(args, data_dir):
    """What is wrong with the options that the parser cannot see, or None."""
    if not data_dir:
        return "give --data-dir or set KT_DATA_DIR (e.g. ../shared/data)"
    if args.pos_tags and args.word_slots:
        return "--pos-tags and --word-slots both fill the word slots: give one"
    if not math.isfinite(args.opening_penalty):
        return f"--opening-penalty must be a finite number, got {args.opening_penalty}"
    if args.unconstrained and args.opening_penalty:
        return (
            "--opening-penalty applies to the constrained search: drop --unconstrained or "
            "--opening-penalty"
        )
    return None


def print_scores(report, figures, beam_size, alpha, output_dir):
    """The dev parse's EVALB summary and search figures, for people (the JSON line follows)."""
    print(
        f"wsj_sample.dev, {figures['sentences']} sentences, beam {beam_size}, alpha "
        f"{alpha}, opening penalty {figures['opening_penalty']}: parsed in "
        f"{figures['parse_seconds']} s "
        f"({figures['sentences_per_second']} sentences/s); {figures['repaired']} output(s) "
        f"repaired {figures['repairs'] or ''}; trees: {output_dir}/dev.parsed.trees"
    )
    print(report.format())
    if "gold_tags" in figures:
        comparable = figures["gold_tags"]
        print(
            f"Scored with the gold tags in, as XX and word slots are (bracket F1 over every "
            f"sentence): F1 {comparable['f1']} (P {comparable['precision']} / R "
            f"{comparable['recall']}), error sentences {comparable['error_sentences']}"
        )


def main(argv=None):
    args = build_parser().parse_args(argv)

    data_dir = args.data_dir or os.environ.get("KT_DATA_DIR")
    problem = option_problem(args, data_dir)
    if problem:
        print(f"ptb_parsing: {problem}", file=sys.stderr)
        return 2
    linearizer = Linearizer(
        pos_tags=args.pos_tags,
        closing_labels=not args.no_closing_labels,
        word_slots=args.word_slots,
    )
    opening_penalty = args.opening_penalty
    vocab_size = args.vocab_size or (CPU_VOCAB_SIZE if args.cpu else VOCAB_SIZE)[args.data]
    try:
        from keras_transformer.training import train
        from keras_transformer.training.config_reading import read_config_file

        output_dir = args.output_dir or read_config_file(RECIPES[args.data, args.cpu])["output_dir"]
        if args.phrases < 0:
            raise UserInputError(f"--phrases {args.phrases}: a sampling weight is >= 0")
        max_minutes = args.max_train_minutes
        if max_minutes is not None and not (math.isfinite(max_minutes) and max_minutes >= 0):
            raise UserInputError(
                f"--max-train-minutes {max_minutes}: give minutes > 0, or 0 for no limit"
            )
        max_minutes = "recipe" if max_minutes is None else (max_minutes or None)
        corpus = prepare_corpus(
            data_dir, output_dir, args.data, linearizer, vocab_size, phrases=args.phrases > 0
        )
        if args.data_only:
            print(f"the parsing data of {RECIPES[args.data, args.cpu]}:")
            for source, target in corpus["train"] + [corpus["dev"]]:
                print(f"  {source}  {target}")
            print(f"  {corpus['vocab']}")
            return 0
        config = parsing_config(
            corpus,
            output_dir,
            args.data,
            args.cpu,
            args.train_steps,
            args.gum_weight,
            args.precision,
            args.phrases,
            max_minutes,
            args.decay,
            args.overrides,
        )
        started = time.perf_counter()
        result = train(config)
        train_seconds = time.perf_counter() - started
        print(result.summary())
        report, figures = evaluate_dev(
            output_dir,
            corpus["dev_trees"],
            linearizer,
            args.beam_size,
            args.alpha,
            args.max_extra_length,
            args.dev_lines,
            constrained=not args.unconstrained,
            opening_penalty=opening_penalty,
        )
    except UserInputError as error:
        print(f"ptb_parsing: error: {error}", file=sys.stderr)
        return 2
    print_scores(report, figures, args.beam_size, args.alpha, output_dir)
    print(
        report.to_json(
            pipeline="ptb_parsing",
            data=args.data,
            cpu=args.cpu,
            step=result.step,
            train_steps=config.schedule.train_steps,
            decay=config.schedule.decay,
            stopped_by_time=result.stopped_by_time,
            train_seconds=round(result.train_seconds, 1),
            train_seconds_this_call=round(train_seconds, 1),
            phrases=args.phrases,
            linearizer=linearizer.to_dict(),
            **figures,
        )
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        from keras_transformer.errors import report_interrupted

        sys.exit(report_interrupted("ptb_parsing"))
