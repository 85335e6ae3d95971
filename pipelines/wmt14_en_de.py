"""WMT 2014 English-German, the paper's main task: base (100k steps) or big (300k steps).

Section 5: a shared 37000-token BPE vocabulary, batches of about 25000 target tokens, Adam with
the Noam schedule (4000 warmup steps), label smoothing 0.1, checkpoints every 10 minutes, and
(6.1) the average of the last 5 (base) or 20 (big) checkpoints. Development set: newstest2013.

Training data: TFDS `wmt14_translate/de-en` (downloaded and prepared by TFDS on first use:
`pip install tensorflow-datasets`, network needed) or local line-aligned files with
`--train-source/--train-target` (repeatable). Dev: `$KT_DATA_DIR/wmt/newstest2013.{en,de}` or
`--dev-source/--dev-target`. On 8 GPUs use the default `--token-budget 3125`: one micro-batch
per replica per update, the paper's setting; on fewer devices micro-batches are accumulated.

    python pipelines/wmt14_en_de.py [--preset base|big] [--output-dir DIR]
        [--train-source F --train-target F ...] [--precision mixed_bfloat16] [--xla]
        [--strategy auto|mirrored|multi_worker] [--set KEY=VALUE ...]

Running the same command again resumes from the newest checkpoint.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from keras_transformer.errors import UserInputError  # noqa: E402
from keras_transformer.training import TrainingConfig, train  # noqa: E402
from keras_transformer.training.config import apply_overrides  # noqa: E402

RECIPES = {  # preset -> (train_steps, checkpoints averaged), paper 5.2 and 6.1
    "base": (100_000, 5),
    "big": (300_000, 20),
}


def wmt14_config(
    args,
    source="en",
    target="de",
    tfds_name="wmt14_translate/de-en",
    vocab_size=37000,
    vocab_model_type="bpe",
    recipes=RECIPES,
):
    """The paper's recipe as a `TrainingConfig` dict, from the parsed command line."""
    train_steps, average_last = recipes[args.preset]
    if args.train_source:
        if len(args.train_source) != len(args.train_target or []):
            raise UserInputError("give one --train-target per --train-source")
        train_corpora = [
            {"source": s, "target": t} for s, t in zip(args.train_source, args.train_target)
        ]
    else:
        train_corpora = [{"tfds": tfds_name, "source": source, "target": target, "split": "train"}]
    dev = None
    dev_source, dev_target = args.dev_source, args.dev_target
    if dev_source is None and os.environ.get("KT_DATA_DIR"):
        wmt = os.path.join(os.environ["KT_DATA_DIR"], "wmt")
        dev_source = os.path.join(wmt, f"newstest2013.{source}")
        dev_target = os.path.join(wmt, f"newstest2013.{target}")
    if dev_source is not None:
        dev = {"source": dev_source, "target": dev_target}
    return {
        "output_dir": args.output_dir or f"runs/wmt14_{source}_{target}_{args.preset}",
        "model": {"preset": args.preset, "max_length": 256},
        "data": {
            "train": train_corpora,
            "dev": dev,
            "vocab": args.vocab,
            "vocab_size": vocab_size,
            "vocab_model_type": vocab_model_type,
            "token_budget": args.token_budget,
            "max_length": 256,
        },
        "schedule": {
            "train_steps": train_steps,
            "warmup_steps": 4000,
            "tokens_per_update": 25_000,
            "eval_every_steps": 1000,
            "log_every_steps": 100,
        },
        "checkpoints": {
            "every_minutes": 10.0,
            "keep_last": average_last,
            "average_last": average_last,
        },
        "strategy": args.strategy,
        "precision": args.precision,
        "xla": args.xla,
    }


def recipe_config(args):
    """EN-DE (section 5.1): TFDS `wmt14_translate/de-en`, a shared 37000-piece BPE vocabulary."""
    return wmt14_config(args)


def parser_for(description, presets):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--preset", choices=presets, default="base", help="the model (default: base)"
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
        default=3125,
        help="tokens per batch per replica and side (default: 3125 = 25000/8)",
    )
    parser.add_argument(
        "--strategy", default="auto", choices=["auto", "one_device", "mirrored", "multi_worker"]
    )
    parser.add_argument(
        "--precision", default="float32", choices=["float32", "mixed_bfloat16", "mixed_float16"]
    )
    parser.add_argument("--xla", action="store_true", help="compile the train step with XLA")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="override a TrainingConfig key (repeatable)",
    )
    return parser


def run(name, values, overrides):
    try:
        result = train(TrainingConfig.from_dict(apply_overrides(values, overrides)))
    except UserInputError as error:
        print(f"{name}: error: {error}", file=sys.stderr)
        return 2
    print(result.summary())
    return 0


def main(argv=None):
    args = parser_for(__doc__.splitlines()[0], list(RECIPES)).parse_args(argv)
    try:
        values = recipe_config(args)
    except UserInputError as error:
        print(f"wmt14_en_de: error: {error}", file=sys.stderr)
        return 2
    return run("wmt14_en_de", values, args.overrides)


if __name__ == "__main__":
    sys.exit(main())
