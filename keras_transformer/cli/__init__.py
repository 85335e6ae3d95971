"""`keras-transformer` (and `python -m keras_transformer`): one CLI, one module per subcommand.

Each subcommand module defines `HELP` (one line), `EXAMPLE` (a command line), `add_arguments(
parser)` and `run(args) -> int`. Modules are imported only when their command runs, so that
`keras-transformer info` starts without TensorFlow.
"""

import argparse
import importlib
import os
import sys

from keras_transformer.cli.startup import (
    VERBOSE_FLAG,
    VERBOSE_HELP,
    dropping_startup_noise,
    import_tensorflow_quietly,
    quiet_tensorflow,
)
from keras_transformer.errors import UserInputError, report_interrupted

# name -> module under keras_transformer.cli; the order is the order of `--help`.
COMMANDS = {
    "vocab": "vocab",
    "import": "import_model",
    "train": "train",
    "average": "average",
    "translate": "translate",
    "evaluate": "evaluate",
    "score": "score",
    "parse": "parse",
    "export": "export",
    "attention": "attention",
    "info": "info",
}

_HELP = {
    "vocab": "train the shared source-target SentencePiece vocabulary (paper 5.1)",
    "import": "import a pretrained checkpoint (OPUS-MT / Marian) as a run folder",
    "train": "train a model with model.fit from a YAML/JSON config (paper 5)",
    "average": "average the weights of the last N checkpoints (paper 6.1)",
    "translate": "translate text with beam search (paper 6.1)",
    "evaluate": "translate a test set and score it with sacreBLEU and chrF, or score parses "
    "with EVALB (--task parsing)",
    "score": "score given translations: log P(target | source) per line pair",
    "parse": "parse sentences into constituency trees (paper 6.3)",
    "export": "export a SavedModel for TensorFlow Serving, or a CTranslate2 model",
    "attention": "draw the attention weights of one layer for a sentence (paper figures 3-5)",
    "info": "print parameter counts of presets (paper Table 3)",
}


def _load(name):
    return importlib.import_module(f"keras_transformer.cli.{COMMANDS[name]}")


def _needs_tensorflow(module, args):
    """Whether the command will load TensorFlow (models or tf.data): a command module that
    does not for some arguments says so with `needs_tensorflow(args)`."""
    needs = getattr(module, "needs_tensorflow", None)
    return True if needs is None else needs(args)


def build_parser(argv_command=None):
    from keras_transformer import __version__

    parser = argparse.ArgumentParser(
        prog="keras-transformer",
        description="The Transformer of 'Attention Is All You Need' (Vaswani et al., 2017).",
    )
    parser.add_argument("--version", action="version", version=f"keras-transformer {__version__}")
    # Read by main before parsing, so that it may stand anywhere on the line.
    parser.add_argument(VERBOSE_FLAG, action="store_true", help=VERBOSE_HELP)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        if name == argv_command:
            module = _load(name)
            sub = subparsers.add_parser(
                name,
                help=module.HELP,
                description=module.HELP,
                epilog=f"example:\n  {module.EXAMPLE}",
                formatter_class=argparse.RawDescriptionHelpFormatter,
            )
            module.add_arguments(sub)
        else:
            # Only the command being run is imported; the others need just their help line.
            subparsers.add_parser(name, help=_HELP[name])
    return parser


def _show_input_warnings_as_one_line(command):
    """Prints an `InputWarning` (a too long line truncated) as `keras-transformer COMMAND:
    warning: MESSAGE`, as errors are printed, instead of Python's file, line number, category
    and source line; every other warning shows as Python shows it."""
    import warnings

    from keras_transformer.errors import InputWarning

    # The one shown before (main may run several times in one process, e.g. in tests).
    show = getattr(warnings.showwarning, "shows_otherwise", warnings.showwarning)

    def show_warning(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, InputWarning):
            print(f"keras-transformer {command}: warning: {message}", file=file or sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)

    show_warning.shows_otherwise = show
    warnings.showwarning = show_warning


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    # TensorFlow's C++ start-up chatter (a CUDA probe that reads as an error on a machine
    # without a GPU) hides the output people came for; --verbose shows it.
    verbose = quiet_tensorflow(argv)
    argv = [argument for argument in argv if argument != VERBOSE_FLAG]
    command = next((a for a in argv if not a.startswith("-")), None)
    # A command module that imports TensorFlow as it loads speaks here, before run().
    with dropping_startup_noise(verbose):
        parser = build_parser(command if command in COMMANDS else None)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    module = _load(args.command)
    if _needs_tensorflow(module, args):
        import_tensorflow_quietly(verbose)
    _show_input_warnings_as_one_line(args.command)
    try:
        status = module.run(args) or 0
        sys.stdout.flush()  # a closed pipe shows here, where it is handled, not at exit
        return status
    except UserInputError as error:
        print(f"keras-transformer {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return report_interrupted(f"keras-transformer {args.command}")
    except BrokenPipeError:
        # The reader went away (`... | head`): stop quietly, as a Unix filter does. Python would
        # otherwise print a traceback, and another one when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a filter killed by the pipe
