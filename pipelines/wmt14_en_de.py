"""WMT 2014 English-German, the paper's main task: base (100k steps) or big (300k steps).

The recipes are configs/wmt14_en_de_base.yaml and configs/wmt14_en_de_big.yaml (section 5: a
shared 37000-token BPE vocabulary, updates of about 25000 tokens, the Noam schedule with 4000
warmup steps, checkpoints every 10 minutes and, 6.1, the average of the last 5 or 20); the
options below change them for one run.

Training data: TFDS `wmt14_translate/de-en` (downloaded and prepared by TFDS on first use:
`pip install tensorflow-datasets`, network needed) or local line-aligned files with
`--train-source/--train-target` (repeatable). Dev: `$KT_DATA_DIR/wmt/newstest2013.{en,de}` or
`--dev-source/--dev-target` (none without either). On 8 GPUs the recipe's token budget, 3125,
is one micro-batch per replica per update, the paper's setting; on fewer devices micro-batches
are accumulated.

    python pipelines/wmt14_en_de.py [--preset base|big] [--output-dir DIR]
        [--train-source F --train-target F ...] [--precision mixed_bfloat16] [--xla]
        [--strategy auto|mirrored|multi_worker] [--set KEY=VALUE ...]

Running the same command again resumes from the newest checkpoint.
"""

import argparse
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
from keras_transformer.training import TrainingConfig, train  # noqa: E402

CONFIGS = os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs")
)
RECIPES = {  # --preset -> the recipe file
    "base": os.path.join(CONFIGS, "wmt14_en_de_base.yaml"),
    "big": os.path.join(CONFIGS, "wmt14_en_de_big.yaml"),
}


def recipe_config(args, recipes=RECIPES, overrides=()):
    """The `--preset` recipe's `TrainingConfig` with the command line's changes."""
    changes = {}
    if args.output_dir:
        changes["output_dir"] = args.output_dir
    if args.train_source:
        if len(args.train_source) != len(args.train_target or []):
            raise UserInputError("give one --train-target per --train-source")
        changes["data.train"] = [
            {"source": s, "target": t} for s, t in zip(args.train_source, args.train_target)
        ]
    if args.dev_source is not None:
        changes["data.dev"] = {"source": args.dev_source, "target": args.dev_target}
    elif not os.environ.get("KT_DATA_DIR"):
        changes["data.dev"] = None  # no newstest2013 to read: train without a dev set
    for key, value in (
        ("data.vocab", args.vocab),
        ("data.token_budget", args.token_budget),
        ("strategy", args.strategy),
        ("precision", args.precision),
    ):
        if value is not None:
            changes[key] = value
    if args.xla:
        changes["xla"] = True
    return TrainingConfig.from_file(recipes[args.preset], overrides, changes)


def parser_for(description, presets):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(VERBOSE_FLAG, action="store_true", help=VERBOSE_HELP)
    parser.add_argument(
        "--preset", choices=presets, default="base", help="the recipe (default: base)"
    )
    parser.add_argument("--output-dir", default=None, help="the run folder")
    parser.add_argument(
        "--train-source",
        action="append",
        default=None,
        help="local training source file (repeatable; default: TFDS)",
    )
    parser.add_argument(
        "--train-target",
        action="append",
        default=None,
        help="local training target file, line-aligned with --train-source",
    )
    parser.add_argument("--dev-source", default=None, help="dev source (default: newstest2013)")
    parser.add_argument("--dev-target", default=None, help="dev target")
    parser.add_argument(
        "--vocab", default=None, help="an existing SentencePiece .model (default: train one)"
    )
    parser.add_argument(
        "--token-budget",
        type=int,
        default=None,
        help="tokens per batch per replica and side (default: the recipe's, 3125 = 25000/8)",
    )
    parser.add_argument(
        "--strategy", default=None, choices=["auto", "one_device", "mirrored", "multi_worker"]
    )
    parser.add_argument(
        "--precision", default=None, choices=["float32", "mixed_bfloat16", "mixed_float16"]
    )
    parser.add_argument("--xla", action="store_true", help="compile the train step with XLA")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="override a key of the recipe (repeatable)",
    )
    return parser


def run(name, args, recipes):
    """Trains the recipe; a bad option or file is one line on stderr and exit status 2."""
    try:
        result = train(recipe_config(args, recipes, args.overrides))
    except UserInputError as error:
        print(f"{name}: error: {error}", file=sys.stderr)
        return 2
    print(result.summary())
    return 0


def main(argv=None):
    args = parser_for(__doc__.splitlines()[0], list(RECIPES)).parse_args(argv)
    return run("wmt14_en_de", args, RECIPES)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        from keras_transformer.errors import report_interrupted

        sys.exit(report_interrupted("wmt14_en_de"))
