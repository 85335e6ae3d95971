"""`keras-transformer translate`: text from stdin (or a file) to stdout (or a file).

Lines are read in chunks, translated with beam search (paper 6.1 settings by default) and
written in input order, one translation per line; an empty line gives an empty line. With
`--n-best N`, each input gives N lines `INDEX ||| TRANSLATION ||| SCORE` (Moses' n-best
layout, INDEX counting from 0). `--length-penalty power` ranks by log P / |Y|^alpha (Marian,
OPUS-MT) instead of the paper's GNMT form. A setting outside its range (`--beam-size`, `--alpha`,
`--max-extra-length`, `--n-best`, `--top-p`, `--batch-tokens`; see
`keras_transformer.cli._model_options`) stops with one line that names the flag, the value and
the range. `--prefix-file` gives each line a target prefix that its translations start with
(`keras_transformer.cli.prefix_file`).
"""

import contextlib
import os

from keras_transformer.cli._model_options import add_model_arguments, translator_from_args
from keras_transformer.cli._text_files import line_chunks, open_input, open_output
from keras_transformer.cli.prefix_file import check_prefix_file, prefix_chunks
from keras_transformer.errors import UserInputError
from keras_transformer.files import check_new_output_file

HELP = "translate text with beam search (paper 6.1)"
EXAMPLE = "keras-transformer translate --model runs/ende < newstest2014.en > newstest2014.hyp.de"


def add_arguments(parser):
    add_model_arguments(parser)
    group = parser.add_argument_group("input and output")
    group.add_argument("-i", "--input", metavar="FILE", help="source text (default: stdin)")
    group.add_argument("-o", "--output", metavar="FILE", help="translations (default: stdout)")
    group.add_argument(
        "--alignments",
        metavar="FILE",
        help="also write each translation's word alignment to FILE, one line of Pharaoh "
        "'i-j' pairs (source word i, target word j, 0-based) per output line",
    )
    group.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing --output or --alignments file (written only once the run "
        "has succeeded)",
    )
    group.add_argument(
        "--n-best",
        type=int,
        default=1,
        metavar="N",
        help="write the N best translations per line as 'INDEX ||| TEXT ||| SCORE'",
    )
    group.add_argument(
        "--prefix-file",
        metavar="FILE",
        help="target prefixes, one per input line (an empty line for none): each "
        "translation starts with its line's prefix and the search finishes it",
    )
    group.add_argument(
        "--chunk-size",
        type=int,
        default=1024,
        metavar="LINES",
        help="lines read and translated at a time (default: 1024)",
    )


def run(args):
    if args.chunk_size < 1:
        raise UserInputError("--chunk-size must be at least 1")
    prefix_count = check_prefix_file(args.prefix_file, args.input) if args.prefix_file else 0
    _check_output_files(args)
    translator = translator_from_args(args, num_hypotheses=args.n_best)
    from keras_transformer.translation import input_lines

    index = 0
    with (
        open_input(args.input) as (source, name),
        prefix_chunks(args.prefix_file, args.chunk_size, prefix_count) as prefixes,
        open_output(args.output) as out,
        open_output(args.alignments) if args.alignments else contextlib.nullcontext() as links,
    ):
        for chunk in line_chunks(source, args.chunk_size, name):
            target_prefix = prefixes.take(chunk, index, name)
            with input_lines(name, index + 1):  # messages name the file's line numbers
                results = translator.translate(
                    chunk, target_prefix=target_prefix, return_alignments=bool(args.alignments)
                )
            for result in results:
                if args.alignments:
                    result = _write_alignments(links, result, args.n_best)
                if args.n_best == 1:
                    out.write(result + "\n")
                else:
                    for text, score in result:
                        out.write(f"{index} ||| {text} ||| {score:.4f}\n")
                index += 1
            out.flush()
        prefixes.finish(index, name)
    return 0


def _check_output_files(args):
    """Existing --output and --alignments files are refused before any work, unless
    --overwrite: nothing written earlier is replaced unasked."""
    if args.output:
        check_new_output_file(args.output, "--output", args.overwrite)
    if not args.alignments:
        return
    check_new_output_file(args.alignments, "--alignments", args.overwrite)
    if args.output and os.path.abspath(args.output) == os.path.abspath(args.alignments):
        raise UserInputError("--alignments and --output name the same file; give two files")


def _write_alignments(links, result, n_best):
    """Writes the Pharaoh line(s) of one input's result and returns the result without its
    alignments, as `translate` gives it."""
    from keras_transformer.decoding.alignment import to_pharaoh

    if n_best == 1:
        text, pairs = result
        links.write(to_pharaoh(pairs) + "\n")
        return text
    for _, _, pairs in result:
        links.write(to_pharaoh(pairs) + "\n")
    return [(text, score) for text, score, _ in result]
