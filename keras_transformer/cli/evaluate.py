"""`keras-transformer evaluate`: translate a test set and score it with sacreBLEU and chrF.

`--task parsing --gold G --test T` scores parser output instead: EVALB's labelled bracket
recall, precision, F1 and complete match with COLLINS.prm semantics (or `--prm FILE`),
with error and skip sentences counted and listed (`keras_transformer.parsing.evalb`). Test
trees whose every tag is `XX` (a parser that predicts no tags, as `keras-transformer parse`
by default) get the gold tags put in first, as EVALB deletes punctuation by tag; tagging
accuracy is then reported as not measured. Translation flags are refused with `--task
parsing`, not ignored.

Prints the sacreBLEU score with its signature, chrF, and with `--paper-bleu` the paper-style
tokenized BLEU (clearly labelled: not comparable with sacreBLEU). `--json` ends the output with
one JSON line of the headline figures. `--hypotheses FILE` scores an existing output instead
of translating.
"""

import sys

from keras_transformer.cli.translate import (
    add_model_arguments,
    open_output,
    recording_adder,
    translator_from_args,
)
from keras_transformer.errors import UserInputError

HELP = (
    "translate a test set and score it with sacreBLEU and chrF, or score parses "
    "with EVALB (--task parsing)"
)
EXAMPLE = (
    "keras-transformer evaluate --model runs/ende --source newstest2014.en "
    "--reference newstest2014.de --paper-bleu --json"
)


def add_arguments(parser):
    parser.add_argument(
        "--task",
        choices=["translation", "parsing"],
        default="translation",
        help="translation (sacreBLEU, chrF; default) or parsing (EVALB "
        "bracket F1 of --test trees against --gold trees)",
    )
    parsing = parser.add_argument_group("parsing (--task parsing)")
    parsing.add_argument("--gold", metavar="FILE", help="gold trees, one per line")
    parsing.add_argument("--test", metavar="FILE", help="parser output, one tree per line")
    parsing.add_argument(
        "--prm", metavar="FILE", help="an EVALB parameter file (default: COLLINS.prm's settings)"
    )
    parsing.add_argument(
        "--per-sentence",
        action="store_true",
        help="print EVALB's per-sentence table before the summary",
    )
    # The test set's flags but --json, and the model's, are translation's: --task parsing
    # refuses them when set.
    translation_actions = []
    group = parser.add_argument_group("test set")
    add = recording_adder(group, translation_actions)
    add("--source", metavar="FILE", help="source sentences, one per line")
    add(
        "--reference",
        action="append",
        metavar="FILE",
        help="reference translations, line-aligned (repeat for several; needed for translation)",
    )
    add(
        "--hypotheses",
        metavar="FILE",
        help="score this system output instead of translating --source",
    )
    add("--output", metavar="FILE", help="write the translations here")
    add(
        "--overwrite",
        action="store_true",
        help="replace an existing --output file (written only once the run has succeeded)",
    )
    add(
        "--target-language",
        metavar="LANG",
        help="target language code (de, fr, ...): sacreBLEU's tokenizer choice "
        "and the Moses rules of --paper-bleu (default for it: de)",
    )
    add("--lowercase", action="store_true", help="case-insensitive BLEU")
    add(
        "--paper-bleu",
        action="store_true",
        help="also print tokenized BLEU with compound splitting, as "
        "tensor2tensor's get_ende_bleu.sh (NOT comparable with sacreBLEU)",
    )
    group.add_argument(
        "--json", action="store_true", help="end with one JSON line of the headline figures"
    )
    # The model is needed only to translate: optional here, checked in run().
    model_actions = add_model_arguments(parser)
    model_actions["model"].required = False
    translation_actions += model_actions.values()
    parser.set_defaults(
        translation_flags=[
            (max(action.option_strings, key=len), action.dest, action.default)
            for action in translation_actions
        ]
    )


def _read(path):
    try:
        with open(path, encoding="utf-8") as file:
            lines = [line.rstrip("\r\n") for line in file]
    except OSError as error:
        raise UserInputError(f"cannot read {path!r}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise UserInputError(f"{path!r} is not UTF-8 text ({error.reason})") from None
    if not lines:
        raise UserInputError(f"{path!r} is empty; a test set needs at least one line")
    return lines


def run_parsing(args):
    from keras_transformer.parsing.evalb import (
        COLLINS,
        evaluate,
        read_gold_lines,
        read_params,
        with_gold_tags,
    )
    from keras_transformer.parsing.trees import read_text_lines

    given = [
        flag for flag, dest, default in args.translation_flags if getattr(args, dest) != default
    ]
    if given:
        raise UserInputError(
            f"{given[0]} is a translation flag, not used by --task parsing "
            "(which reads --gold, --test, --prm, --per-sentence, --json): "
            f"drop {' '.join(given)}"
        )
    if not args.gold or not args.test:
        raise UserInputError(
            "--task parsing needs --gold FILE and --test FILE (one tree per "
            "line each, the same sentences in the same order)"
        )
    params = read_params(args.prm) if args.prm else COLLINS
    gold = read_gold_lines(args.gold)
    test, slots = with_gold_tags(gold, read_text_lines(args.test))
    if slots:
        print(
            "the test trees have XX word slots (no predicted tags): scored with the gold "
            "tags put in; tagging accuracy not measured",
            file=sys.stderr,
        )
    report = evaluate(gold, test, params, tags_predicted=not slots)
    print(report.format(per_sentence=args.per_sentence))
    if args.json:
        print(report.to_json(gold=args.gold, test=args.test, prm=args.prm or "COLLINS.prm"))
    return 0


def run(args):
    from keras_transformer.evaluation import evaluate, headline_json

    if args.task == "parsing":
        return run_parsing(args)
    if not args.reference:
        raise UserInputError(
            "give --reference FILE (the reference translations), or "
            "--task parsing --gold G --test T to score parses"
        )
    references = [_read(path) for path in args.reference]
    extra = {}
    if args.hypotheses:
        hypotheses = _read(args.hypotheses)
    else:
        if not args.source or not args.model:
            raise UserInputError(
                "give --model and --source to translate, or --hypotheses "
                "to score an existing output"
            )
        import time

        sources = _read(args.source)
        # Before the model is loaded: a misaligned file should not cost a test set's decoding.
        for path, reference_set in zip(args.reference, references):
            if len(reference_set) != len(sources):
                raise UserInputError(
                    f"--reference {path!r} has {len(reference_set)} lines but --source "
                    f"{args.source!r} has {len(sources)}; the files must be line-aligned"
                )
        if args.output:  # before the model is loaded and the test set translated
            from keras_transformer.files import check_new_output_file

            check_new_output_file(args.output, "--output", args.overwrite)
        translator = translator_from_args(args)
        start = time.perf_counter()
        from keras_transformer.translation import input_lines

        with input_lines(repr(args.source), 1):  # messages name the file's line numbers
            hypotheses = translator.translate(sources)
        seconds = time.perf_counter() - start
        extra = {
            "seconds": round(seconds, 2),
            "sentences_per_second": round(len(sources) / max(seconds, 1e-9), 2),
        }
        print(f"translated {len(sources)} sentences in {seconds:.1f} s", file=sys.stderr)
        if args.output:
            try:
                with open_output(args.output) as file:
                    file.writelines(h + "\n" for h in hypotheses)
            except OSError as error:
                raise UserInputError(f"cannot write {args.output!r}: {error.strerror}") from None
    report = evaluate(
        hypotheses,
        references,
        target_language=args.target_language,
        lowercase=args.lowercase,
        with_paper_bleu=args.paper_bleu,
    )
    print(report.format())
    if args.json:
        print(headline_json(report, **extra))
    return 0
