"""`keras-transformer average`: average the weights of the last N checkpoints (paper 6.1).

The paper averages the last 5 checkpoints (written every 10 minutes) for base models and the
last 20 for big ones. Only model weights are averaged, not optimizer state. The result is a
`.keras` model that `translate`, `evaluate` and `export` load.

The model carries the run's `vocab.model` inside it, and a parsing run's `parsing.json` is
copied beside it, so that `--output` anywhere gives a model that loads as the run's own
(`parse` reads `parsing.json` beside the model); a different `parsing.json` already there is
refused before anything is written (the opening penalty counts: `parse` reads it from there).
"""

import os

HELP = "average the weights of the last N checkpoints (paper 6.1)"
EXAMPLE = "keras-transformer average runs/ende --last 5"


def add_arguments(parser):
    parser.add_argument(
        "run",
        metavar="RUN_DIR_OR_CHECKPOINTS",
        help="a training output_dir, or its checkpoints/ folder",
    )
    parser.add_argument(
        "--last",
        type=int,
        default=5,
        help="how many of the newest checkpoints to average (default: 5; the "
        "paper uses 20 for big models)",
    )
    parser.add_argument(
        "--fraction",
        type=float,
        default=None,
        metavar="F",
        help="of the last N, average only those written in the last F of the "
        "updates trained (0 < F <= 1; --last is then a cap): what "
        "checkpoints.average_last_fraction does at the end of training",
    )
    parser.add_argument(
        "--checkpoints",
        nargs="+",
        default=None,
        metavar="PREFIX",
        help="average these checkpoints (path prefixes such as "
        "RUN/checkpoints/ckpt-1000) instead of the last N",
    )
    parser.add_argument(
        "--output",
        default=None,
        metavar="FILE",
        help="where to write the model (default: RUN_DIR/averaged.keras, which training "
        "itself rewrites; another existing file needs --overwrite)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing --output file",
    )


def _parsing_settings_to_copy(run_dir, output):
    """The run's `parsing.json` when it has to be copied beside `output`, else None.

    Raises:
        UserInputError: when a different `parsing.json` is already beside `output`.
    """
    from keras_transformer.errors import UserInputError
    from keras_transformer.parsing.parser import (
        PARSING_FILE,
        read_opening_penalty,
        read_parsing_settings,
    )

    source = os.path.join(run_dir, PARSING_FILE)
    target = os.path.join(os.path.dirname(os.path.abspath(output)), PARSING_FILE)
    if not os.path.isfile(source) or (os.path.exists(target) and os.path.samefile(source, target)):
        return None

    def settings(path):
        # As `parse` reads them (a file written before an option existed means its default).
        # The penalty is a decoding setting, but replacing it would silently change how
        # another run's model parses.
        folder = os.path.dirname(path)
        return read_parsing_settings(folder), read_opening_penalty(folder)

    if os.path.exists(target) and settings(target) != settings(source):
        raise UserInputError(
            f"{target!r} differs from {source!r}, the parsing settings of the run averaged: "
            f"give --output a folder without a {PARSING_FILE}, or this run's own"
        )
    return source


def _refuse_to_replace(output, run_dir, overwrite):
    """Raises `UserInputError` when `output` exists and is not the run's own `averaged.keras`
    (which training rewrites at every end, so averaging anew may too) and `overwrite` is off."""
    from keras_transformer.errors import UserInputError
    from keras_transformer.runs.layout import OutputDir

    own = os.path.abspath(OutputDir(run_dir).averaged_model)
    if overwrite or not os.path.exists(output) or os.path.abspath(output) == own:
        return
    raise UserInputError(
        f"--output {output!r} exists already; give --overwrite to replace it, or another --output"
    )


def run(args):
    from keras_transformer.errors import UserInputError
    from keras_transformer.files import atomic_write, check_output_file
    from keras_transformer.runs.averaging import average_checkpoints
    from keras_transformer.runs.layout import OutputDir
    from keras_transformer.runs.models import atomic_save_model

    run_dir = args.run
    if os.path.basename(os.path.normpath(run_dir)) == "checkpoints":
        run_dir = os.path.dirname(os.path.normpath(run_dir))
    output = args.output or OutputDir(run_dir).averaged_model
    if not output.endswith(".keras"):
        raise UserInputError(f"--output {output!r} must end with .keras")
    _refuse_to_replace(output, run_dir, args.overwrite)
    check_output_file(output, "--output")
    parsing_settings = _parsing_settings_to_copy(run_dir, output)
    if args.checkpoints and args.fraction is not None:
        raise UserInputError(
            "--fraction chooses among the last N checkpoints; with "
            "--checkpoints, list only the ones to average"
        )
    if args.checkpoints:
        model = average_checkpoints(args.checkpoints)
    else:
        model = average_checkpoints(args.run, last=args.last, last_fraction=args.fraction)
    # atomic_save_model puts in only a vocab.model beside the output: outside the run folder
    # there is none, or another run's.
    vocabulary = OutputDir(run_dir).vocabulary
    if getattr(model, "tokenizer", False) is None and os.path.isfile(vocabulary):
        from keras_transformer.data.vocabulary import SubwordVocabulary

        model.tokenizer = SubwordVocabulary.from_file(vocabulary).to_tokenizer()
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    atomic_save_model(model, output)
    if parsing_settings:
        target = os.path.join(
            os.path.dirname(os.path.abspath(output)), os.path.basename(parsing_settings)
        )
        with open(parsing_settings, encoding="utf-8") as source, atomic_write(target) as file:
            file.write(source.read())
    print(
        f"averaged {len(model.averaged_checkpoints)} checkpoints "
        f"({os.path.basename(model.averaged_checkpoints[0])} .. "
        f"{os.path.basename(model.averaged_checkpoints[-1])}) into {output}"
    )
    return 0
