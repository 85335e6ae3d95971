"""`keras-transformer export`: a SavedModel that TensorFlow Serving serves with no Python of
ours: text in, beam search in the graph, text out."""

from keras_transformer.export.saved_model import (
    DEFAULT_ALPHA,
    DEFAULT_BEAM_SIZE,
    DEFAULT_MAX_BEAM_SIZE,
    DEFAULT_MAX_EXTRA_LENGTH,
)

HELP = "export a SavedModel for TensorFlow Serving (text in, beam search, text out)"
EXAMPLE = "keras-transformer export --model runs/ende --name ende   # -> saved_models/ende/1/"


def add_arguments(parser):
    parser.add_argument(
        "--model",
        required=True,
        metavar="PATH",
        help="a training run folder (its averaged.keras, else model.keras), a "
        ".keras file or a checkpoint prefix",
    )
    parser.add_argument(
        "--vocab",
        default=None,
        metavar="FILE",
        help="the SentencePiece .model (default: the one the .keras file "
        "carries, else vocab.model beside the model)",
    )
    parser.add_argument(
        "--name",
        required=True,
        help="model name: TF Serving's --model_name and the folder under --base-dir",
    )
    parser.add_argument(
        "--version",
        type=int,
        default=None,
        help="version number (default: the next free one); an existing "
        "version is never overwritten",
    )
    parser.add_argument(
        "--base-dir",
        default="saved_models",
        help="where NAME/VERSION/ goes (default: saved_models)",
    )
    parser.add_argument(
        "--max-beam-size",
        type=int,
        default=DEFAULT_MAX_BEAM_SIZE,
        help=f"widest beam a request may ask for; one search per width is "
        f"compiled into the graph (default: {DEFAULT_MAX_BEAM_SIZE})",
    )
    parser.add_argument(
        "--beam-size",
        type=int,
        default=DEFAULT_BEAM_SIZE,
        help=f"default beam of requests (default: {DEFAULT_BEAM_SIZE}, paper 6.1)",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=DEFAULT_ALPHA,
        help=f"default length penalty (default: {DEFAULT_ALPHA}, paper 6.1)",
    )
    parser.add_argument(
        "--max-extra-length",
        type=int,
        default=DEFAULT_MAX_EXTRA_LENGTH,
        help=f"default output tokens beyond the input length (default: "
        f"{DEFAULT_MAX_EXTRA_LENGTH}, paper 6.1)",
    )


def run(args):
    from keras_transformer.errors import UserInputError
    from keras_transformer.export import export_saved_model
    from keras_transformer.translation import load_model

    if 1 <= args.max_beam_size < args.beam_size:  # other values: the range checks below
        raise UserInputError(
            f"--beam-size={args.beam_size} (the beam of a request that names none; default "
            f"{DEFAULT_BEAM_SIZE}) is above --max-beam-size={args.max_beam_size}: lower "
            "--beam-size or raise --max-beam-size"
        )
    model, files = load_model(args.model)
    vocabulary = args.vocab or files["vocabulary"]
    if vocabulary is None:
        raise UserInputError(
            f"{args.model} carries no vocabulary and has no vocab.model "
            "beside it; pass --vocab FILE, the "
            "SentencePiece model the model was trained with"
        )
    path = export_saved_model(
        model,
        vocabulary,
        args.name,
        version=args.version,
        base_dir=args.base_dir,
        max_beam_size=args.max_beam_size,
        beam_size=args.beam_size,
        alpha=args.alpha,
        max_extra_length=args.max_extra_length,
    )
    print(f"exported {files['model']} to {path}")
    print(
        f"serve it: tensorflow_model_server --rest_api_port=8501 --model_name={args.name} "
        f"--model_base_path={path.parent.resolve()}"
    )
    return 0
