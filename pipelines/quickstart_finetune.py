"""Writes the in-domain corpus that configs/quickstart_finetune.yaml fine-tunes the quickstart
model on: spans of time ("two years and three months ago" -> "vor zwei Jahren und drei
Monaten", "for one hour and five minutes" -> "eine Stunde und fünf Minuten lang"), a domain
the quickstart corpus lacks, in disjoint train (2000 distinct sentences, 2084 lines), dev (300)
and test (500) splits (keras_transformer/data/number_expressions.py, domain "durations"). The
sentences use only letters of the quickstart corpus, since a fine-tuned model keeps its
vocabulary.

    python pipelines/quickstart_finetune.py [--output-dir DIR]

then `keras-transformer train --config configs/quickstart_finetune.yaml` fine-tunes
runs/quickstart on it (docs/recipes/fine-tuning.md).
"""

import argparse
import os
import pathlib
import sys

CONFIG = pathlib.Path(__file__).resolve().parents[1] / "configs" / "quickstart_finetune.yaml"
SIZES = (("train", 2000), ("dev", 300), ("test", 500))


def write_corpus(config_file=CONFIG, output_dir=None):
    """Writes the splits into the folder of `config_file`'s training files, or into
    OUTPUT_DIR/corpus; returns `{split: (english path, german path)}`."""
    from keras_transformer.data.number_expressions import write_number_expressions
    from keras_transformer.training.config_reading import read_config_file

    if output_dir is None:
        folder = os.path.dirname(read_config_file(config_file)["data"]["train"][0]["source"])
    else:
        folder = pathlib.Path(output_dir) / "corpus"
    return write_number_expressions(folder, seed=0, sizes=SIZES, domain="durations")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--output-dir",
        default=None,
        help="write the corpus under DIR/corpus (default: where "
        "configs/quickstart_finetune.yaml reads it, runs/quickstart_finetune/corpus)",
    )
    args = parser.parse_args(argv)
    corpus = write_corpus(output_dir=args.output_dir)
    print("the fine-tuning corpus, spans of time (English, German):")
    for split, (english, german) in corpus.items():
        print(f"  {split:5} {english}  {german}")
    if args.output_dir is None:
        config = os.path.relpath(CONFIG)
        config = CONFIG if config.startswith("..") else config
        print(f"fine-tune runs/quickstart on it with: keras-transformer train --config {config}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
