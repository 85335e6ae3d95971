"""`keras-transformer info`: a preset's hyperparameters and parameter count, or all of Table 3."""

from keras_transformer.config import PRESETS, TABLE3, TransformerConfig

HELP = "print a preset's hyperparameters and parameter count, or every row of Table 3"
EXAMPLE = "keras-transformer info --table3 --vocab-size 37000"

_COLUMNS = (
    "num_layers",
    "d_model",
    "d_ff",
    "num_heads",
    "key_dim",
    "value_dim",
    "dropout",
    "label_smoothing",
    "positional",
)
_PAPER_SYMBOLS = ("N", "d_model", "d_ff", "h", "d_k", "d_v", "P_drop", "eps_ls", "positions")


def add_arguments(parser):
    parser.add_argument(
        "--preset",
        default="base",
        choices=list(PRESETS),
        metavar="NAME",
        help="preset name: base, big, big_en_fr or a Table 3 row such as "
        "'A.h=4', 'C.d_model=256', 'E.learned' (default: base)",
    )
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=37000,
        help="shared vocabulary size (default: 37000, the EN-DE BPE of 5.1)",
    )
    parser.add_argument(
        "--table3",
        action="store_true",
        help="print every Table 3 row beside the paper's params x10^6 column",
    )


def needs_tensorflow(args):
    """Parameter counts come from the config alone."""
    return False


def run(args):
    if args.table3:
        print(table3(args.vocab_size))
        return 0
    config = TransformerConfig.from_preset(args.preset, vocab_size=args.vocab_size)
    for symbol, field in zip(_PAPER_SYMBOLS, _COLUMNS):
        print(f"{symbol:>10}  {getattr(config, field)}")
    print(
        f"{'params':>10}  {config.parameter_count():,} "
        f"({config.parameter_count() / 1e6:.1f}M at vocab {args.vocab_size}, "
        f"shared embeddings: {config.shared_embeddings})"
    )
    return 0


def table3(vocab_size):
    """Table 3 as text: each preset's hyperparameters, our count and the paper's column."""
    header = [*_PAPER_SYMBOLS, "ours x10^6", "paper x10^6", "diff"]
    rows = []
    for name in TABLE3:
        config = TransformerConfig.from_preset(name, vocab_size=vocab_size)
        ours = config.parameter_count() / 1e6
        paper = TABLE3[name]
        diff = f"{(ours - paper) / paper:+.1%}" if paper else ""
        rows.append(
            [
                name,
                *(str(getattr(config, f)) for f in _COLUMNS),
                f"{ours:.1f}",
                str(paper or ""),
                diff,
            ]
        )
    widths = [max(len(r[i]) for r in rows + [["preset", *header]]) for i in range(len(header) + 1)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(["preset", *header], widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
    lines.append(
        f"vocab {vocab_size}, one shared embedding matrix (3.4), biases in every "
        "projection; the paper states neither its exact vocabulary nor its biases."
    )
    return "\n".join(lines)
