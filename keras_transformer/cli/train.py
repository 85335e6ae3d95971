"""`keras-transformer train`: train (or resume) a model from a YAML/JSON `TrainingConfig`.

Running the same command again after an interruption resumes from the newest checkpoint in
the config's `output_dir`. The keys of the file are documented in
`keras_transformer.training.config`; `--set KEY=VALUE` overrides one (dotted keys).
"""

import sys

HELP = "train a model with model.fit from a YAML/JSON config (paper 5)"
EXAMPLE = "keras-transformer train --config configs/multi30k.yaml --set schedule.train_steps=2000"


def add_arguments(parser):
    parser.add_argument(
        "--config",
        required=True,
        metavar="FILE",
        help="the training config, YAML (.yaml/.yml) or JSON (.json)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="override a config key, e.g. schedule.train_steps=2000 or "
        "output_dir=runs/try2 (repeatable; values are read as YAML)",
    )
    parser.add_argument(
        "--output-dir", default=None, metavar="DIR", help="shorthand for --set output_dir=DIR"
    )


def run(args):
    from keras_transformer.training import TrainingConfig, TrainingDivergedError, train

    overrides = list(args.overrides)
    if args.output_dir:
        overrides.append(f"output_dir={args.output_dir}")
    config = TrainingConfig.from_file(args.config, overrides=overrides)
    _log_to_stderr()
    try:
        result = train(config)
    except TrainingDivergedError as error:
        print(f"keras-transformer train: {error}", file=sys.stderr)
        return 1
    print(result.summary())
    return 0


def _log_to_stderr():
    """The trainer's progress notes (resuming from step N, the batch layout, averaging) on
    stderr as they happen, as OpenNMT-tf and fairseq print theirs; a program that configured
    logging itself keeps its own."""
    import logging

    package = logging.getLogger("keras_transformer")
    if package.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    package.addHandler(handler)
    package.setLevel(logging.INFO)
