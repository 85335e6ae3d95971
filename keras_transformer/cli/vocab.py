"""`keras-transformer vocab`: train the shared source-target SentencePiece vocabulary (paper 5.1).

One model learns from the source and the target side of every corpus together. Presets give
the paper's settings: `en-de` (BPE, 37000 pieces) and `en-fr` (unigram word-pieces, 32000);
`--vocab-size` and `--model-type` override them. Writes PREFIX.model and PREFIX.vocab.
"""

import json
import os
import time

from keras_transformer.errors import UserInputError

HELP = "train the shared source-target SentencePiece vocabulary (paper 5.1)"
EXAMPLE = (
    "keras-transformer vocab --pair train.en.gz train.de.gz --preset en-de --output vocab/ende"
)


def add_arguments(parser):
    inputs = parser.add_argument_group("corpora (at least one; both sides of each are used)")
    inputs.add_argument(
        "--pair",
        nargs=2,
        action="append",
        default=[],
        metavar=("SOURCE", "TARGET"),
        help="two line-aligned text files, optionally gzipped; repeat for several corpora",
    )
    inputs.add_argument(
        "--tsv",
        action="append",
        default=[],
        metavar="FILE",
        help="a tab-separated file with the source in column 0 and the target in column 1",
    )
    inputs.add_argument(
        "--skip-bad-lines",
        action="store_true",
        help="skip (and count) non-UTF-8 lines and short TSV rows instead of stopping",
    )
    model = parser.add_argument_group("vocabulary")
    model.add_argument(
        "--output",
        required=True,
        metavar="PREFIX",
        help="output path without extension: writes PREFIX.model, PREFIX.vocab",
    )
    model.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing PREFIX.model / PREFIX.vocab",
    )
    model.add_argument(
        "--preset",
        choices=["en-de", "en-fr"],
        default="en-de",
        help="the paper's setting: en-de = BPE 37000, en-fr = unigram 32000 (default: en-de)",
    )
    model.add_argument(
        "--vocab-size",
        type=int,
        default=None,
        help="number of pieces, rounded up to a multiple of 8 (default: preset)",
    )
    model.add_argument(
        "--model-type",
        choices=["bpe", "unigram"],
        default=None,
        help="bpe (paper EN-DE) or unigram word-pieces (EN-FR) (default: preset)",
    )
    model.add_argument(
        "--character-coverage",
        type=float,
        default=1.0,
        help="share of characters given their own pieces; the rest are spelled "
        "in bytes (default: 1.0; use 0.9995 for CJK)",
    )
    model.add_argument(
        "--input-sentence-size",
        type=int,
        default=10_000_000,
        help="train on at most this many sentences, sampled at random (0: all; default: 10000000)",
    )
    model.add_argument(
        "--max-sentence-length",
        type=int,
        default=4192,
        help="sentences longer than this many bytes are left out of training",
    )
    model.add_argument(
        "--normalization",
        default="nmt_nfkc",
        choices=["nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf", "identity"],
        help="SentencePiece normalization rule (default: nmt_nfkc)",
    )
    model.add_argument(
        "--no-byte-fallback",
        action="store_true",
        help="map unknown characters to <unk> instead of spelling them in bytes",
    )
    model.add_argument("--threads", type=int, default=None, help="trainer threads (default: all)")
    model.add_argument("--seed", type=int, default=0, help="seed of the sentence sampling")


def run(args) -> int:
    from keras_transformer.data.corpora import TextPairCorpus, TsvCorpus
    from keras_transformer.data.vocabulary import PRESETS, train_vocabulary

    on_bad_line = "skip" if args.skip_bad_lines else "error"
    corpora = [
        TextPairCorpus(source, target, on_bad_line=on_bad_line) for source, target in args.pair
    ]
    corpora += [TsvCorpus(path, on_bad_line=on_bad_line) for path in args.tsv]
    if not corpora:
        raise UserInputError("give at least one corpus: --pair SOURCE TARGET or --tsv FILE")
    preset = PRESETS[args.preset]
    vocab_size = preset.vocab_size if args.vocab_size is None else args.vocab_size
    model_type = args.model_type or preset.model_type
    for flag, value in (
        ("--input-sentence-size", args.input_sentence_size),
        ("--max-sentence-length", args.max_sentence_length - 1),
    ):
        if value < 0:
            raise UserInputError(f"{flag} must not be negative")
    if not args.overwrite:
        for path in (args.output + ".model", args.output + ".vocab"):
            if os.path.exists(path):
                raise UserInputError(
                    f"{path!r} exists already (--output {args.output!r}); give --overwrite to "
                    "replace it, or another --output prefix"
                )

    started = time.perf_counter()
    vocabulary = train_vocabulary(
        corpora,
        args.output,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=args.character_coverage,
        input_sentence_size=args.input_sentence_size,
        max_sentence_length=args.max_sentence_length,
        byte_fallback=not args.no_byte_fallback,
        normalization=args.normalization,
        num_threads=args.threads,
        seed=args.seed,
    )
    checks = [corpus.check() for corpus in corpora]  # cached by train_vocabulary's check
    summary = {
        "model": os.path.abspath(args.output + ".model"),
        "vocab": os.path.abspath(args.output + ".vocab"),
        "model_type": model_type,
        "vocab_size": vocabulary.size,
        "special_ids": {
            "pad": vocabulary.pad_id,
            "unk": vocabulary.unk_id,
            "bos": vocabulary.bos_id,
            "eos": vocabulary.eos_id,
        },
        "pairs": sum(check.num_pairs for check in checks),
        "skipped_bad_lines": sum(len(check.skipped_lines) for check in checks),
        "seconds": round(time.perf_counter() - started, 2),
    }
    print(json.dumps(summary, indent=2))
    return 0
