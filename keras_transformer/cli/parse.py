"""`keras-transformer parse`: sentences from stdin (or a file) to trees on stdout (or a file).

One PTB-tokenized sentence per line in (words separated by spaces, `(` and `)` may be given
as is or as `-LRB-` / `-RRB-`), one bracketed tree per line out, in input order; an empty line
gives `(TOP)`. `--tokenize` tokenizes raw text first, the Penn Treebank way (nltk's
`TreebankWordTokenizer`: `pip install keras-nmt-transformer[parsing]`). Decoding defaults to
section 6.3's settings: beam 21, alpha 0.3, output length input + 300, searching only
well-formed trees over exactly the input words (`--unconstrained`: a free search whose outputs
are repaired into such trees; the count of outputs that needed repair goes to stderr), with
the opening penalty the run's `parsing.json` records (its pipeline's dev parse used it;
`--opening-penalty` overrides it).
Several `--model`s parse as an ensemble (one vocabulary and one linearization, e.g. two runs
of `pipelines/ptb_parsing.py` on the same data): the mean of their log-probabilities.
"""

import math
import sys
import time

from keras_transformer.cli.translate import (
    add_model_arguments,
    line_chunks,
    open_input,
    open_output,
    translator_from_args,
)
from keras_transformer.errors import UserInputError

HELP = "parse sentences into constituency trees (paper 6.3)"
EXAMPLE = "keras-transformer parse --model runs/ptb_parsing_wsj < sentences.txt > trees.txt"


def add_arguments(parser):
    from keras_transformer.parsing.parser import PAPER_DECODING

    actions = add_model_arguments(parser)
    for dest in ("beam_size", "alpha", "max_extra_length"):
        actions[dest].default = PAPER_DECODING[dest]
        actions[dest].help = f"default: {PAPER_DECODING[dest]} (paper 6.3)"
    group = parser.add_argument_group("input and output")
    group.add_argument(
        "-i", "--input", metavar="FILE", help="sentences, one per line (default: stdin)"
    )
    group.add_argument("-o", "--output", metavar="FILE", help="trees (default: stdout)")
    group.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing --output file (written only once the run has succeeded)",
    )
    group.add_argument(
        "--tokenize",
        action="store_true",
        help="the input is raw text: tokenize it the Penn Treebank way first",
    )
    group.add_argument(
        "--unconstrained",
        action="store_true",
        help="search freely and repair malformed outputs afterwards (default: "
        "search only well-formed trees over the input words)",
    )
    group.add_argument(
        "--opening-penalty",
        type=float,
        default=None,
        metavar="NATS",
        help="subtracted from each opening bracket's log-probability in the "
        "constrained search (default: the run's parsing.json, else 0)",
    )
    group.add_argument(
        "--chunk-size",
        type=int,
        default=256,
        metavar="LINES",
        help="lines read and parsed at a time (default: 256)",
    )


def run(args):
    from keras_transformer.parsing.parser import Parser, read_opening_penalty, read_parsing_settings
    from keras_transformer.translation import input_lines

    if args.chunk_size < 1:
        raise UserInputError("--chunk-size must be at least 1")
    tokenizer = None
    if args.tokenize:
        try:
            from nltk.tokenize import TreebankWordTokenizer
        except ImportError:
            raise UserInputError(
                "--tokenize needs nltk (the Penn Treebank tokenizer): pip "
                "install 'keras-nmt-transformer[parsing]', or give "
                "tokenized text"
            ) from None
        tokenizer = TreebankWordTokenizer()
    if args.output:  # before the model loads
        from keras_transformer.files import check_new_output_file

        check_new_output_file(args.output, "--output", args.overwrite)
    # Before the model loads: a run without parsing.json is refused in one line.
    linearizer = read_parsing_settings(args.model)  # several --model: an ensemble
    penalty = args.opening_penalty
    if args.unconstrained and penalty:
        raise UserInputError(
            "--opening-penalty applies to the constrained search: drop "
            "--unconstrained or --opening-penalty"
        )
    if penalty is None:
        penalty = 0.0 if args.unconstrained else read_opening_penalty(args.model)
    if not math.isfinite(penalty):
        raise UserInputError(f"--opening-penalty must be a finite number, got {penalty}")
    parser = Parser(
        translator_from_args(args),
        linearizer,
        constrained=not args.unconstrained,
        opening_penalty=penalty,
    )
    count = repaired = 0
    start = time.perf_counter()
    with open_input(args.input) as (source, name), open_output(args.output) as out:
        for chunk in line_chunks(source, args.chunk_size, name):
            if tokenizer is not None:
                chunk = [" ".join(tokenizer.tokenize(line)) for line in chunk]
            with input_lines(name, count + 1):  # messages name the file's line numbers
                trees = parser.parse(chunk)
            for tree in trees:
                out.write(str(tree) + "\n")
            out.flush()
            count += len(chunk)
            repaired += parser.last_repaired
    seconds = time.perf_counter() - start
    print(
        f"parsed {count} sentences in {seconds:.1f} s ({count / max(seconds, 1e-9):.2f} "
        f"sentences/s); {repaired} output(s) needed repair",
        file=sys.stderr,
    )
    return 0
