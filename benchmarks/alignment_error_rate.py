"""Alignment error rate (Och and Ney 2003) of the attention alignments of a trained model on
a gold set of sure and possible links: tests/data/quickstart_alignments.tsv, hand-made for the
quickstart task, by default.

The gold file: one pair per line, `source TAB target TAB sure TAB possible` (Pharaoh `i-j`
pairs; possible links in addition to the sure ones), `#` lines are comments. The targets are
aligned as given (forced alignment), for the default layer and heads and, with
`--all-layers`, for every decoder layer with the heads averaged and each head alone.

Usage:
    python -m benchmarks.alignment_error_rate --model runs/quickstart [--all-layers]
"""

import argparse
import json
import pathlib

GOLD = (
    pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "quickstart_alignments.tsv"
)


def read_gold(path):
    """(sources, targets, sure, possible) of a gold file."""
    from keras_transformer.decoding.alignment import parse_pharaoh

    rows = [
        line.rstrip("\n").split("\t")
        for line in pathlib.Path(path).read_text(encoding="utf-8").splitlines(keepends=True)
        if line.strip() and not line.startswith("#")
    ]
    rows = [row + [""] * (4 - len(row)) for row in rows]
    return (
        [row[0] for row in rows],
        [row[1] for row in rows],
        [parse_pharaoh(row[2]) for row in rows],
        [parse_pharaoh(row[3]) for row in rows],
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a run folder or .keras file")
    parser.add_argument("--gold", default=str(GOLD), help="the gold alignments (TSV)")
    parser.add_argument("--all-layers", action="store_true", help="every layer and head")
    args = parser.parse_args(argv)

    from keras_transformer.decoding import alignment
    from keras_transformer.translation import Translator

    translator = Translator.load(args.model)
    sources, targets, sure, possible = read_gold(args.gold)
    settings = [(None, None)]
    if args.all_layers:
        layers = translator.decoder.model.config.num_layers
        heads = translator.decoder.model.config.num_heads
        settings = [(layer, head) for layer in range(layers) for head in [None, *range(heads)]]
    for layer, head in settings:
        found = alignment.align_texts(
            translator.decoder, translator.vocabulary, sources, targets, layer, head
        )
        aer = alignment.alignment_error_rate(found, sure, possible)
        layer_name = alignment.DEFAULT_LAYER_INDEX if layer is None else layer
        print(
            json.dumps(
                {
                    "layer_index": layer_name,
                    "heads": "average" if head is None else head,
                    "sentences": len(sources),
                    "aer": round(aer, 4),
                }
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
