"""How closely a parsing run fits each of its corpora: memorized gold trees or room to learn.

For a finished `pipelines/ptb_parsing.py` run folder, scores its averaged model (no dropout)
on the first `--lines` pairs of the WSJ dev set and of each training corpus in the run's
`data/` folder (`wsj.train`, and `gum.train` for `--data wsj+gum`), as the dev loss during
training is scored: the label-smoothed loss, the log-perplexity (plain negative
log-likelihood per target token) and the token accuracy under teacher forcing. A training
corpus at almost 100% with the dev set well below is memorized: more passes over it teach
the model nothing more, and the levers are other data, regularization or the model.

    KT_DATA_DIR=../shared/data .venv/bin/python benchmarks/parsing_fit.py RUN_DIR [--lines 273]

Prints a table and ends with one JSON line.
"""

import argparse
import json
import math
import os
import pathlib
import sys
import tempfile
import warnings

os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # TrainingModel's loss is TensorFlow's
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from machine import cpu_description  # noqa: E402  (benchmarks/machine.py)

CORPORA = ("wsj.dev", "wsj.train", "gum.train")


def fit_of(training_model, vocabulary, source_lines, target_lines, folder):
    """{loss, nll, token_accuracy} of `training_model` on the given pairs."""
    from keras_transformer import data

    source, target = os.path.join(folder, "source"), os.path.join(folder, "target")
    for path, lines in ((source, source_lines), (target, target_lines)):
        with open(path, "w", encoding="utf-8") as file:
            file.writelines(lines)
    pipeline = data.TranslationPipeline(
        [data.TextPairCorpus(source, target)],
        vocabulary,
        token_budget=2048,
        max_length=512,
        num_replicas=1,
        shuffle_buffer=1,
    )
    result = training_model.evaluate(
        pipeline.dataset(shuffle=False, repeat=False), verbose=0, return_dict=True
    )
    return {
        "loss": round(float(result["loss"]), 4),
        "nll": round(math.log(float(result["perplexity"])), 4),
        "token_accuracy": round(float(result["token_accuracy"]), 4),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a finished ptb_parsing.py run folder (averaged.keras)")
    parser.add_argument(
        "--lines",
        type=int,
        default=273,
        help="pairs scored per corpus, from the top (default: 273, the WSJ dev set)",
    )
    args = parser.parse_args()
    model_path = os.path.join(args.run, "averaged.keras")
    if not os.path.isfile(model_path):
        sys.exit(f"no {model_path}: give a finished ptb_parsing.py run folder")

    from keras_transformer.data import SubwordVocabulary
    from keras_transformer.training.output_dir import load_model
    from keras_transformer.training.training_model import TrainingModel

    model, _ = load_model(model_path)
    vocabulary = SubwordVocabulary.from_file(os.path.join(args.run, "vocab.model"))
    # Each corpus is read once, to its end, which Keras reports as running out of data.
    warnings.filterwarnings("ignore", message="Your input ran out of data")
    training_model = TrainingModel(model)
    training_model.compile(optimizer="adam")
    rows = {}
    with tempfile.TemporaryDirectory() as folder:
        for name in CORPORA:
            words = os.path.join(args.run, "data", f"{name}.words")
            if not os.path.isfile(words):
                print(f"{name}: not in this run, skipped")
                continue
            with open(words, encoding="utf-8") as file:
                source_lines = file.readlines()[: args.lines]
            with open(
                os.path.join(args.run, "data", f"{name}.trees.lin"), encoding="utf-8"
            ) as file:
                target_lines = file.readlines()[: args.lines]
            rows[name] = dict(
                fit_of(training_model, vocabulary, source_lines, target_lines, folder),
                pairs=len(source_lines),
            )

    cpu, flags = cpu_description()
    print(f"\n{args.run}, first {args.lines} pairs of each; {cpu} ({', '.join(flags)})\n")
    print("| corpus | pairs | label-smoothed loss | log-perplexity | token accuracy |")
    print("|---|---:|---:|---:|---:|")
    for name, row in rows.items():
        print(
            f"| {name} | {row['pairs']} | {row['loss']:.4f} | {row['nll']:.4f} | "
            f"{100 * row['token_accuracy']:.2f}% |"
        )
    print(
        json.dumps(
            {
                "benchmark": "parsing_fit",
                "run": args.run,
                "lines": args.lines,
                "machine": cpu,
                **rows,
            }
        )
    )


if __name__ == "__main__":
    main()
