"""`keras-transformer score`: log P(target | source) of given translations, one per line.

Reads a source file and a line-aligned target file and writes, per line pair, the sum of the
target's token log-probabilities (eos included) under the model, by teacher forcing as in
training (`Translator.score`); `--normalize` writes the per-token average instead. Files of
different line counts stop with one error before the model loads. Uses: rescoring n-best
lists, filtering parallel data, comparing references (fairseq's `--score-reference`,
CTranslate2's `score_batch`).
"""

from keras_transformer.cli.translate import line_chunks, open_input, open_output
from keras_transformer.errors import UserInputError

HELP = "score given translations: log P(target | source) per line pair"
EXAMPLE = (
    "keras-transformer score --model runs/ende --source newstest2014.en "
    "--target newstest2014.de > scores.txt"
)


def add_arguments(parser):
    model = parser.add_argument_group("model")
    model.add_argument(
        "--model",
        action="append",
        required=True,
        metavar="PATH",
        help="a training output_dir, a .keras file or a checkpoint prefix (as for "
        "translate); repeat it to score with an ensemble",
    )
    model.add_argument(
        "--vocab",
        metavar="FILE",
        help="the SentencePiece .model (default: the one the model carries, else "
        "vocab.model beside it)",
    )
    model.add_argument(
        "--average-last", type=int, metavar="N", help="average the last N checkpoints"
    )
    model.add_argument(
        "--ensemble-combine",
        choices=("log_probs", "probs"),
        default="log_probs",
        help="ensembles: mean of log-probabilities (default) or of probabilities",
    )
    group = parser.add_argument_group("input and output")
    group.add_argument("--source", required=True, metavar="FILE", help="source sentences")
    group.add_argument(
        "--target", required=True, metavar="FILE", help="translations, line-aligned with --source"
    )
    group.add_argument(
        "--normalize",
        action="store_true",
        help="write the mean log-probability per target token (eos counted) instead of the sum",
    )
    group.add_argument("-o", "--output", metavar="FILE", help="scores (default: stdout)")
    group.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing --output file (written only once the run has succeeded)",
    )
    group.add_argument("--batch-size", type=int, default=32, help="sentence pairs per batch")
    group.add_argument(
        "--batch-tokens",
        type=int,
        metavar="N",
        help="batch pairs of similar length up to N padded tokens (pairs x longest side) "
        "instead of --batch-size pairs (which stays the most)",
    )
    group.add_argument(
        "--chunk-size",
        type=int,
        default=1024,
        metavar="LINES",
        help="line pairs read and scored at a time (default: 1024)",
    )
    group.add_argument(
        "--on-too-long",
        choices=("truncate", "error"),
        default="truncate",
        help="sources longer than the model's max_length: truncate with a warning (default) "
        "or stop; a target too long to score whole is always an error",
    )
    group.add_argument("--no-compile", action="store_true", help="run eagerly (debugging)")


def count_lines(path):
    """The number of lines of `path` (a last line without a newline counts)."""
    with open_input(path) as (file, _):
        count, last = 0, b"\n"
        for block in iter(lambda: file.read(1 << 20), b""):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def run(args):
    if args.batch_size < 1:
        raise UserInputError("--batch-size must be at least 1")
    if args.chunk_size < 1:
        raise UserInputError("--chunk-size must be at least 1")
    from keras_transformer.decoding.settings import check_decoding_settings

    check_decoding_settings(
        batch_tokens=args.batch_tokens, labels={"batch_tokens": "--batch-tokens"}
    )
    sources, targets = count_lines(args.source), count_lines(args.target)
    if sources != targets:
        raise UserInputError(
            f"--source {args.source!r} has {sources} lines but --target {args.target!r} has "
            f"{targets}; give one target line per source line"
        )
    if args.output:  # before the model loads
        from keras_transformer.files import check_new_output_file

        check_new_output_file(args.output, "--output", args.overwrite)
    from keras_transformer.translation import Translator, input_lines, target_lines

    translator = Translator.load(
        args.model if len(args.model) > 1 else args.model[0],
        vocabulary=args.vocab,
        average_last=args.average_last,
        batch_size=args.batch_size,
        batch_tokens=args.batch_tokens,
        on_too_long=args.on_too_long,
        compile=not args.no_compile,
        ensemble_combine=args.ensemble_combine,
    )
    index = 0
    with (
        open_input(args.source) as (source, source_name),
        open_input(args.target) as (target, target_name),
        open_output(args.output) as out,
    ):
        chunks = zip(
            line_chunks(source, args.chunk_size, source_name),
            line_chunks(target, args.chunk_size, target_name),
        )
        for source_chunk, target_chunk in chunks:
            with input_lines(source_name, index + 1), target_lines(target_name, index + 1):
                scores = translator.score(source_chunk, target_chunk, normalize=args.normalize)
            out.writelines(f"{score:.6f}\n" for score in scores)
            index += len(scores)
            out.flush()
    return 0
