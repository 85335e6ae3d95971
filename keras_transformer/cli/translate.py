"""`keras-transformer translate`: text from stdin (or a file) to stdout (or a file).

Lines are read in chunks, translated with beam search (paper 6.1 settings by default) and
written in input order, one translation per line; an empty line gives an empty line. With
`--n-best N`, each input gives N lines `INDEX ||| TRANSLATION ||| SCORE` (Moses' n-best
layout, INDEX counting from 0). A setting outside its range (`--beam-size`, `--alpha`,
`--max-extra-length`, `--n-best`, `--top-p`, `--batch-tokens`; see
`keras_transformer.decoding.settings`) stops with one line that names the flag, the value and
the range. `--prefix-file` gives each line a target prefix that its translations start with
(`keras_transformer.cli.prefix_file`).
"""

import contextlib
import itertools
import os
import sys

from keras_transformer.errors import UserInputError, not_utf8_message
from keras_transformer.training.output_dir import atomic_write

HELP = "translate text with beam search (paper 6.1)"
EXAMPLE = "keras-transformer translate --model runs/ende < newstest2014.en > newstest2014.hyp.de"


SETTING_FLAGS = {
    "beam_size": "--beam-size",
    "alpha": "--alpha",
    "max_extra_length": "--max-extra-length",
    "num_hypotheses": "--n-best",
    "top_p": "--top-p",
    "batch_tokens": "--batch-tokens",
}


def recording_adder(group, actions):
    """`group.add_argument` that also appends each action it adds to `actions`.

    argparse's list of a parser's actions is private; callers that adjust or list some
    actions keep their own.
    """

    def add_argument(*args, **kwargs):
        action = group.add_argument(*args, **kwargs)
        actions.append(action)
        return action

    return add_argument


def add_model_arguments(parser):
    """Arguments that load a model and configure the search (shared with `evaluate`).

    Returns:
        The actions added, by destination (`"beam_size"`, ...), for callers to adjust.
    """
    actions = []
    add = recording_adder(parser.add_argument_group("model"), actions)
    add(
        "--model",
        action="append",
        required=True,
        metavar="PATH",
        help="a training output_dir (averaged.keras, else model.keras, else the "
        "newest checkpoint), a .keras file or a checkpoint prefix; repeat "
        "it to decode with an ensemble",
    )
    add(
        "--vocab",
        metavar="FILE",
        help="the SentencePiece .model (default: the one the .keras file "
        "carries, else vocab.model beside the model)",
    )
    add(
        "--average-last",
        type=int,
        metavar="N",
        help="average the last N checkpoints of the output_dir (paper 6.1: 5 "
        "for base, 20 for big) instead of loading a saved model",
    )
    add(
        "--ensemble-combine",
        choices=("log_probs", "probs"),
        default="log_probs",
        help="ensembles: mean of log-probabilities (default) or of probabilities",
    )
    add(
        "--precision",
        # No argparse choices: check_precision's error points int8 to the CTranslate2 export.
        metavar="{float32,bf16}",
        default="float32",
        help="bf16: decode with the weights cast to bfloat16 (CPUs with AVX512-BF16 or AMX; "
        "pays at larger batches only, measured in docs/results.md); int8: export to CTranslate2",
    )
    add = recording_adder(parser.add_argument_group("search"), actions)
    add("--search", choices=("beam", "greedy", "sample"), default="beam")
    add("--beam-size", type=int, default=4, help="default: 4 (paper 6.1)")
    add(
        "--alpha",
        type=float,
        default=0.6,
        help="length penalty ((5+|Y|)/6)^alpha, in [0, 10]; default: 0.6 (paper 6.1)",
    )
    add(
        "--max-extra-length",
        type=int,
        default=50,
        help="output length cap = input length + this, in [0, 65536]; default: 50 (paper 6.1)",
    )
    add("--top-k", type=int, default=0, help="sampling: top-k (0: all)")
    add("--temperature", type=float, default=1.0, help="sampling temperature")
    add(
        "--top-p",
        type=float,
        default=1.0,
        metavar="P",
        help="sampling: keep the smallest set of most probable tokens whose probability "
        "reaches P, in (0, 1], after --temperature and --top-k; default: 1 (all)",
    )
    add("--seed", type=int, help="sampling seed")
    add(
        "--batch-size",
        type=int,
        default=32,
        help="sentences per batch (the most, with --batch-tokens)",
    )
    add(
        "--batch-tokens",
        type=int,
        metavar="N",
        help="batch sentences of similar length up to N padded source tokens (sentences x "
        "longest) instead of --batch-size sentences; a longer sentence is a batch alone",
    )
    add(
        "--on-too-long",
        choices=("truncate", "error"),
        default="truncate",
        help="inputs longer than the model's max_length: truncate with a "
        "warning (default) or stop with an error",
    )
    add(
        "--jit-compile",
        action="store_true",
        help="search one-sentence batches with an XLA-compiled graph (TensorFlow): about 2x "
        "lower latency at --batch-size 1, same translations, a compilation of seconds per "
        "input width; larger batches are unaffected",
    )
    add("--no-compile", action="store_true", help="run the search eagerly (debugging)")
    return {action.dest: action for action in actions}


def translator_from_args(args, num_hypotheses=1):
    from keras_transformer.decoding.settings import check_decoding_settings
    from keras_transformer.translation import Translator

    if args.batch_size < 1:
        raise UserInputError("--batch-size must be at least 1")
    # The ranges of translate() and the SavedModel, named by their flags.
    check_decoding_settings(
        beam_size=args.beam_size,
        alpha=args.alpha,
        max_extra_length=args.max_extra_length,
        num_hypotheses=num_hypotheses,
        top_p=args.top_p,
        batch_tokens=args.batch_tokens,
        labels=SETTING_FLAGS,
    )
    if args.search == "sample" and args.temperature <= 0:
        raise UserInputError("--temperature must be > 0")
    _refuse_sampling_flags_without_sampling(args)
    if args.jit_compile and args.no_compile:
        raise UserInputError(
            "--jit-compile compiles the search with XLA, --no-compile runs it eagerly: give "
            "one of them"
        )
    if num_hypotheses > 1 and args.search != "beam":  # before the (slow) load
        raise UserInputError(
            f"--n-best {num_hypotheses} needs beam search, but the search here is "
            f"{args.search!r}: leave out --search {args.search}, or --n-best"
        )
    return Translator.load(
        args.model if len(args.model) > 1 else args.model[0],
        vocabulary=args.vocab,
        average_last=args.average_last,
        precision=args.precision,
        beam_size=args.beam_size,
        alpha=args.alpha,
        max_extra_length=args.max_extra_length,
        num_hypotheses=num_hypotheses,
        search=args.search,
        top_k=args.top_k,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
        batch_size=args.batch_size,
        batch_tokens=args.batch_tokens,
        on_too_long=args.on_too_long,
        compile=not args.no_compile,
        ensemble_combine=args.ensemble_combine,
        jit_compile=args.jit_compile,
    )


def _refuse_sampling_flags_without_sampling(args):
    """A sampling flag given to another search would be ignored: say so instead."""
    if args.search == "sample":
        return
    defaults = {"top_k": 0, "temperature": 1.0, "top_p": 1.0, "seed": None}
    for dest, default in defaults.items():
        if getattr(args, dest, default) != default:
            flag = "--" + dest.replace("_", "-")
            raise UserInputError(
                f"{flag} applies to sampling only (--search sample); the search here is "
                f"{args.search!r}: add --search sample, or leave out {flag}"
            )


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


@contextlib.contextmanager
def open_input(path):
    """`(binary file, name for messages)` of `path`, or of stdin when `path` is None: lines are
    decoded one by one in `line_chunks`, so that a bad byte is reported with its line."""
    if path is None:
        yield sys.stdin.buffer, "stdin"
        return
    try:
        file = open(path, "rb")
    except OSError as error:
        raise UserInputError(f"cannot open {path!r}: {error.strerror}") from None
    with file:
        yield file, repr(path)


@contextlib.contextmanager
def open_output(path):
    """A UTF-8 text file for `path`, or stdout when `path` is None. A file is written beside
    `path` and renamed onto it only when the whole run succeeds: an earlier file of that name
    survives bad input or an interrupted run."""
    if path is None:
        yield sys.stdout
        return
    with contextlib.ExitStack() as stack:
        try:  # only the opening: an error of the run itself passes through unrenamed
            file = stack.enter_context(atomic_write(path, encoding="utf-8"))
        except OSError as error:
            raise UserInputError(f"cannot write {path!r}: {error.strerror}") from None
        yield file


def line_chunks(source, size, name="the input"):
    """Lists of at most `size` lines (newlines stripped) of an open binary file, in order: a
    long input is decoded chunk by chunk and written as it goes, never held whole.

    Raises:
        UserInputError: at a line that is not UTF-8, naming `name` and the line number.
    """

    def lines():
        for number, raw in enumerate(source, 1):
            try:
                yield raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as error:
                raise UserInputError(not_utf8_message(name, number, raw, error)) from None

    stream = lines()
    while chunk := list(itertools.islice(stream, size)):
        yield chunk


def run(args):
    if args.chunk_size < 1:
        raise UserInputError("--chunk-size must be at least 1")
    from keras_transformer.cli.prefix_file import check_prefix_file, prefix_chunks

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
    from keras_transformer.training.output_dir import check_new_output_file

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
