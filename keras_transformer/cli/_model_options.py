"""The options that load a model and configure its search, shared by `translate`, `evaluate`
and `parse`, and the `Translator` they describe.

A setting outside its range (`--beam-size`, `--alpha`, `--max-extra-length`, `--n-best`,
`--top-p`, `--batch-tokens`; see `keras_transformer.decoding.settings`) stops with one line that
names the flag, the value and the range, before the model loads.

Example:
    >>> add_model_arguments(parser)  # doctest: +SKIP
    >>> translator = translator_from_args(parser.parse_args())  # doctest: +SKIP
"""

from keras_transformer.errors import UserInputError

SETTING_FLAGS = {
    "beam_size": "--beam-size",
    "alpha": "--alpha",
    "length_penalty": "--length-penalty",
    "max_extra_length": "--max-extra-length",
    "num_hypotheses": "--n-best",
    "top_p": "--top-p",
    "batch_tokens": "--batch-tokens",
    "batch_size": "--batch-size",
    "temperature": "--temperature",
    "top_k": "--top-k",
    "search": "--search",
    "on_too_long": "--on-too-long",
    "jit_compile": "--jit-compile",
    "compile": "--no-compile",
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
    add(
        "--beam-size",
        type=int,
        default=None,
        help="default: the run's decoding.json (an imported model's), else 4 (paper 6.1)",
    )
    add(
        "--alpha",
        type=float,
        default=None,
        help="length penalty strength, in [0, 10]; default: the run's decoding.json, else "
        "0.6 (paper 6.1)",
    )
    add(
        "--length-penalty",
        choices=("gnmt", "power"),
        default=None,
        help="the length penalty's form: gnmt, ((5+|Y|)/6)^alpha (paper 6.1), or power, "
        "|Y|^alpha (Marian, OPUS-MT, Hugging Face); scores are log P / penalty; default: the "
        "run's decoding.json, else gnmt",
    )
    add(
        "--max-extra-length",
        type=int,
        default=None,
        help="output length cap = input length + this, in [0, 65536]; default: the run's "
        "decoding.json, else 50 (paper 6.1)",
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


# The paper's search (6.1), for runs whose decoding.json (an imported model's) sets none.
PAPER_SEARCH = {"beam_size": 4, "alpha": 0.6, "max_extra_length": 50, "length_penalty": "gnmt"}


def search_settings(args, model_path):
    """The search flags given, the others from the run's decoding.json, else the paper's."""
    from keras_transformer.runs.decoding import with_decoding_defaults

    given = {name: getattr(args, name, None) for name in PAPER_SEARCH}
    return with_decoding_defaults(model_path, given, PAPER_SEARCH)


def translator_from_args(args, num_hypotheses=1):
    """The `Translator` that the options of `add_model_arguments` describe, loaded once every
    setting is checked (a bad one costs no load)."""
    from keras_transformer.decoding.settings import check_translator_settings
    from keras_transformer.translation import Translator

    search = search_settings(args, args.model[0])
    # The rule of Translator and the SavedModel, named by the flags; before the (slow) load.
    check_translator_settings(
        search=args.search,
        **search,
        num_hypotheses=num_hypotheses,
        top_k=args.top_k,
        temperature=args.temperature,
        top_p=args.top_p,
        batch_size=args.batch_size,
        batch_tokens=args.batch_tokens,
        on_too_long=args.on_too_long,
        compile=not args.no_compile,
        jit_compile=args.jit_compile,
        labels=SETTING_FLAGS,
    )
    _refuse_sampling_flags_without_sampling(args)
    return Translator.load(
        args.model if len(args.model) > 1 else args.model[0],
        vocabulary=args.vocab,
        average_last=args.average_last,
        precision=args.precision,
        **search,
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
