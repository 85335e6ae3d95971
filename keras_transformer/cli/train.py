"""`keras-transformer train`: train (or resume) a model from a YAML/JSON `TrainingConfig`.

Running the same command again after an interruption resumes from the newest checkpoint in
the config's `output_dir`. The recipes are in configs/; every key of a config is in the
configuration reference (`python -m keras_transformer.training.config` prints it). `--set
KEY=VALUE` overrides one (dotted keys); `--check` checks a file without training
(nor importing TensorFlow); `--init-from RUN` fine-tunes: a new run that starts from the
weights of the trained run RUN.
"""

import os
import sys

from keras_transformer.errors import UserInputError
from keras_transformer.training.config import TrainingConfig

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
        "--output-dir",
        default=None,
        metavar="DIR",
        help="the run folder (instead of the config's output_dir)",
    )
    parser.add_argument(
        "--init-from",
        default=None,
        metavar="RUN",
        help="fine-tune: start a new run from the weights and vocabulary of the trained run "
        "folder RUN (averaged.keras, else model.keras, else its newest checkpoint), with a "
        "fresh optimizer and step 0 (sets the config's init_from)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="check the config without training or writing anything: every key and type "
        "(exit 1 on an error), missing data files and init_from run (warnings: they may "
        "come later); prints the resolved settings as YAML",
    )


def needs_tensorflow(args):
    """`--check` reads and checks the config file only: no TensorFlow to import."""
    return not args.check


def run(args):
    changes = _changes(args)
    if args.check:
        return _check(args.config, args.overrides, changes)
    return _train(args, changes)


def _changes(args):
    """The config keys that --init-from and --output-dir set, checked against --set."""
    changes = {}
    if args.init_from is not None:
        if not args.init_from.strip():
            raise UserInputError("--init-from is empty; give a trained run folder, e.g. runs/base")
        if any(override.partition("=")[0] == "init_from" for override in args.overrides):
            raise UserInputError(
                "--init-from and --set init_from=... both name the run to start from; give one"
            )
        changes["init_from"] = args.init_from
    if args.output_dir is not None:
        if not args.output_dir.strip():
            raise UserInputError("--output-dir is empty; give the run folder, e.g. runs/try2")
        if any(override.partition("=")[0] == "output_dir" for override in args.overrides):
            raise UserInputError(
                "--output-dir and --set output_dir=... both name the run folder; give one"
            )
        # A path as given, not read as YAML as --set values are (`123` stays a folder name).
        changes["output_dir"] = args.output_dir
    return changes


def _train(args, changes):
    # Imported here: `--check` and `--help` need neither Keras nor TensorFlow.
    from keras_transformer.training.callbacks import TrainingDivergedError
    from keras_transformer.training.trainer import train

    config = TrainingConfig.from_file(args.config, overrides=args.overrides, changes=changes)
    _log_to_stderr()
    try:
        result = train(config)
    except UserInputError as error:
        # The run folder's errors name the flag it came from.
        for flag, key in (("--output-dir", "output_dir"), ("--init-from", "init_from")):
            if getattr(args, key) is not None and str(error).startswith(key + " "):
                raise UserInputError(f"{flag}{str(error)[len(key) :]}") from None
        raise
    except TrainingDivergedError as error:
        print(f"keras-transformer train: {error}", file=sys.stderr)
        return 1
    print(result.summary())
    return 0


def _check(path, overrides, changes):
    """`--check`: the resolved config as YAML on stdout, each missing data file as a warning
    on stderr; 1 for a config that does not load, else 0."""
    try:
        config = TrainingConfig.from_file(path, overrides=overrides, changes=changes)
    except UserInputError as error:
        print(f"keras-transformer train: error: {error}", file=sys.stderr)
        return 1
    for message in config.missing_files():
        print(f"keras-transformer train: warning: {message}", file=sys.stderr)
    if config.init_from is not None and not os.path.isdir(config.init_from):
        # A warning, not an error: a run with checkpoints of its own resumes without it.
        print(
            f"keras-transformer train: warning: init_from: folder {config.init_from!r} does "
            "not exist; train that run first, or check the path",
            file=sys.stderr,
        )
    print(config.to_yaml(), end="")
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
    # Not to the root logger too: a library that logs through it during training installs
    # a root handler (logging.basicConfig), which would print every note a second time.
    package.propagate = False
