"""WMT 2014 English-French: base, or the EN-FR big model (P_drop 0.1, section 6.1).

As `wmt14_en_de.py` (same options), with a 32000 word-piece vocabulary (SentencePiece unigram,
section 5.1), TFDS `wmt14_translate/fr-en`, and newstest2013 EN-FR as the dev set.

    python pipelines/wmt14_en_fr.py [--preset base|big_en_fr] [--output-dir DIR] ...
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from wmt14_en_de import parser_for, run, wmt14_config  # noqa: E402

from keras_transformer.errors import UserInputError  # noqa: E402

RECIPES = {  # preset -> (train_steps, checkpoints averaged), paper 5.2 and 6.1
    "base": (100_000, 5),
    "big_en_fr": (300_000, 20),
}


def recipe_config(args):
    """EN-FR (section 5.1): TFDS `wmt14_translate/fr-en`, 32000 word-pieces (unigram)."""
    return wmt14_config(
        args,
        source="en",
        target="fr",
        tfds_name="wmt14_translate/fr-en",
        vocab_size=32000,
        vocab_model_type="unigram",
        recipes=RECIPES,
    )


def main(argv=None):
    args = parser_for(__doc__.splitlines()[0], list(RECIPES)).parse_args(argv)
    try:
        values = recipe_config(args)
    except UserInputError as error:
        print(f"wmt14_en_fr: error: {error}", file=sys.stderr)
        return 2
    return run("wmt14_en_fr", values, args.overrides)


if __name__ == "__main__":
    sys.exit(main())
