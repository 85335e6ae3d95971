"""WMT 2014 English-French: base, or the EN-FR big model (P_drop 0.1, section 6.1).

As `wmt14_en_de.py` (same options), with the recipes configs/wmt14_en_fr_base.yaml and
configs/wmt14_en_fr_big.yaml: a 32000 word-piece vocabulary (SentencePiece unigram, section
5.1), TFDS `wmt14_translate/fr-en`, and newstest2013 EN-FR as the dev set.

    python pipelines/wmt14_en_fr.py [--preset base|big_en_fr] [--output-dir DIR] ...
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from wmt14_en_de import CONFIGS, parser_for, run  # noqa: E402

RECIPES = {  # --preset -> the recipe file
    "base": os.path.join(CONFIGS, "wmt14_en_fr_base.yaml"),
    "big_en_fr": os.path.join(CONFIGS, "wmt14_en_fr_big.yaml"),
}


def main(argv=None):
    args = parser_for(__doc__.splitlines()[0], list(RECIPES)).parse_args(argv)
    return run("wmt14_en_fr", args, RECIPES)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        from keras_transformer.errors import report_interrupted

        sys.exit(report_interrupted("wmt14_en_fr"))
