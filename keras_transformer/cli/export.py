"""`keras-transformer export`: a SavedModel that TensorFlow Serving serves with no Python of
ours (text in, beam search in the graph, text out), or with `--format ctranslate2` a
CTranslate2 model directory (docs/ctranslate2.md)."""

from keras_transformer.errors import UserInputError
from keras_transformer.export.ctranslate2 import QUANTIZATIONS
from keras_transformer.export.saved_model import (
    DEFAULT_ALPHA,
    DEFAULT_BEAM_SIZE,
    DEFAULT_MAX_BEAM_SIZE,
    DEFAULT_MAX_EXTRA_LENGTH,
)

HELP = (
    "export a SavedModel for TensorFlow Serving (text in, beam search, text out), or a "
    "CTranslate2 model (--format ctranslate2)"
)
EXAMPLE = "keras-transformer export --model runs/ende --name ende   # -> saved_models/ende/1/"
FORMATS = ("saved_model", "ctranslate2")
# Each format's own options, with their defaults: given with the other format, they are an
# error rather than silently ignored.
SAVED_MODEL_OPTIONS = {
    "name": None,
    "version": None,
    "base_dir": "saved_models",
    "max_beam_size": DEFAULT_MAX_BEAM_SIZE,
    "beam_size": None,
    "alpha": None,
    "max_extra_length": None,
    "length_penalty": None,
    "precision": "float32",
}
# The request defaults of a run without decoding.json (an imported model's has its own).
PAPER_SEARCH = {
    "beam_size": DEFAULT_BEAM_SIZE,
    "alpha": DEFAULT_ALPHA,
    "max_extra_length": DEFAULT_MAX_EXTRA_LENGTH,
    "length_penalty": "gnmt",
}
CTRANSLATE2_OPTIONS = {"output": None, "quantization": None, "overwrite": False}


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
        "--format",
        choices=FORMATS,
        default="saved_model",
        help="saved_model (TensorFlow Serving; default) or ctranslate2 (a CTranslate2 "
        "model directory, needs the ctranslate2 extra: --format ctranslate2 --output "
        "ct2/ende)",
    )
    parser.add_argument(
        "--name",
        default=None,
        help="saved_model: model name, TF Serving's --model_name and the folder under "
        "--base-dir (required)",
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
        default=None,
        help=f"default beam of requests (default: the run's decoding.json, else "
        f"{DEFAULT_BEAM_SIZE}, paper 6.1)",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=None,
        help=f"default length penalty (default: the run's decoding.json, else "
        f"{DEFAULT_ALPHA}, paper 6.1)",
    )
    parser.add_argument(
        "--max-extra-length",
        type=int,
        default=None,
        help=f"default output tokens beyond the input length (default: the run's "
        f"decoding.json, else {DEFAULT_MAX_EXTRA_LENGTH}, paper 6.1)",
    )
    parser.add_argument(
        "--length-penalty",
        choices=("gnmt", "power"),
        default=None,
        help="default length penalty form of requests: gnmt, ((5+|Y|)/6)^alpha (paper 6.1), "
        "or power, |Y|^alpha (OPUS-MT); default: the run's decoding.json, else gnmt",
    )
    parser.add_argument(
        "--precision",
        # No argparse choices: check_precision's error points int8 to the CTranslate2 export.
        metavar="{float32,bf16}",
        default="float32",
        help="saved_model: bf16 exports the weights and compute in bfloat16 (opt-in, for "
        "CPUs with AVX512-BF16 or AMX, docs/serving.md); default: float32",
    )
    parser.add_argument(
        "--output",
        default=None,
        metavar="DIR",
        help="ctranslate2: the model directory to write (required)",
    )
    parser.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        default=None,
        help="ctranslate2: store the weights as this type (default: float32)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="ctranslate2: replace an existing CTranslate2 model directory at --output",
    )


def _check_options(args):
    """Each format's required options given, and none of the other format's."""
    other = SAVED_MODEL_OPTIONS if args.format == "ctranslate2" else CTRANSLATE2_OPTIONS
    given = [
        "--" + dest.replace("_", "-")
        for dest, default in other.items()
        if getattr(args, dest) != default
    ]
    if given:
        where = (
            "--output DIR names the model directory"
            if args.format == "ctranslate2"
            else "add --format ctranslate2 to export a CTranslate2 model"
        )
        raise UserInputError(
            f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to "
            f"--format {args.format}: leave {'it' if len(given) == 1 else 'them'} out ({where})"
        )
    if args.format == "ctranslate2" and args.output is None:
        raise UserInputError("--format ctranslate2 needs --output DIR, the directory to write")
    if args.format == "saved_model" and args.name is None:
        raise UserInputError(
            "--name is required: TF Serving's model name (or --format ctranslate2 --output "
            "DIR for a CTranslate2 model)"
        )


def _vocabulary(args, files):
    vocabulary = args.vocab or files["vocabulary"]
    if vocabulary is None:
        raise UserInputError(
            f"{args.model} carries no vocabulary and has no vocab.model "
            "beside it; pass --vocab FILE, the "
            "SentencePiece model the model was trained with"
        )
    return vocabulary


def _search_defaults(args):
    """The request defaults: the flags given, else the run's decoding.json, else the paper's."""
    from keras_transformer.runs.decoding import with_decoding_defaults

    given = {name: getattr(args, name) for name in PAPER_SEARCH}
    return with_decoding_defaults(args.model, given, PAPER_SEARCH)


def _run_ctranslate2(args):
    from keras_transformer.export.ctranslate2 import (
        SENTENCEPIECE_FILE,
        check_output_dir,
        export_ctranslate2,
        import_ctranslate2,
    )
    from keras_transformer.translation import load_model

    # Both before the model is loaded: a missing package or an existing --output costs no wait.
    import_ctranslate2()
    check_output_dir(args.output, args.overwrite)
    model, files = load_model(args.model)
    path = export_ctranslate2(
        model,
        args.output,
        quantization=args.quantization,
        overwrite=args.overwrite,
        vocabulary=_vocabulary(args, files),
    )
    print(f"exported {files['model']} to {path}")
    # An imported model's sources are cut by its source.spm.
    spm = path / "source.spm" if (path / "source.spm").is_file() else path / SENTENCEPIECE_FILE
    print(
        f"translate with it: ctranslate2.Translator({str(path)!r}) and the SentencePiece "
        f"model {spm} (docs/ctranslate2.md)"
    )
    return 0


def run(args):
    from keras_transformer.decoding.precision import check_precision, with_precision
    from keras_transformer.export import export_saved_model
    from keras_transformer.translation import load_model

    _check_options(args)
    if args.format == "ctranslate2":
        return _run_ctranslate2(args)
    search = _search_defaults(args)
    if 1 <= args.max_beam_size < search["beam_size"]:  # other values: the range checks below
        raise UserInputError(
            f"--beam-size={search['beam_size']} (the beam of a request that names none; "
            f"default: the run's decoding.json, else {DEFAULT_BEAM_SIZE}) is above --max-beam-size={args.max_beam_size}: lower "
            "--beam-size or raise --max-beam-size"
        )
    # Before the (slow) load; the serving machine needs the same instructions.
    check_precision(args.precision, for_export=True)
    model, files = load_model(args.model)
    path = export_saved_model(
        with_precision(model, args.precision),
        _vocabulary(args, files),
        args.name,
        version=args.version,
        base_dir=args.base_dir,
        max_beam_size=args.max_beam_size,
        **search,
    )
    print(f"exported {files['model']} to {path}")
    print(
        f"serve it: tensorflow_model_server --rest_api_port=8501 --model_name={args.name} "
        f"--model_base_path={path.parent.resolve()}"
    )
    return 0
