"""`Parser` and `parse`: tokenized words in, constituency trees out (paper section 6.3).

A parser is a trained translation model from words to linearized trees (`linearization`),
decoded with the paper's parsing settings: beam 21, alpha 0.3, maximum output length input +
300 (`PAPER_DECODING`). The search is constrained to well-formed trees over exactly the input
words (`constrained_decoding`); with `constrained=False` it searches freely and each output
is repaired into such a tree when it is not one. `Parser.last_repairs` counts what the last
call had to repair (nothing, when constrained, unless an output cap is too short for a tree).

A run folder trained by `pipelines/ptb_parsing.py` holds `parsing.json` with its
`Linearizer` options (POS tags or `XX` slots, labelled closing brackets) and the opening
penalty its dev parse used (`constrained_decoding`); `Parser.load` reads it, and refuses a
folder without one (a translation run is not a parser). Brackets in
words are given to the model as the treebank spells them (`(` -> `-LRB-`, `:-)` ->
`:--RRB-`: `trees.escape_brackets`), so that trees print unambiguously.

Example:
>>> parse([["The", "dog", "barks", "."]], model="runs/ptb_parsing_wsj")  # doctest: +SKIP
[Tree('(TOP (S (NP (XX The) (XX dog)) (VP (XX barks)) (XX .)))')]
"""

import collections
import json
import os

from keras_transformer.errors import UserInputError
from keras_transformer.parsing.linearization import Delinearized, Linearizer
from keras_transformer.parsing.trees import escape_brackets, merge_same_label_unaries

# Section 6.3: "we increased the maximum output length to input length + 300. We used a beam
# size of 21 and alpha = 0.3 for both WSJ only and the semi-supervised setting."
PAPER_DECODING = {"beam_size": 21, "alpha": 0.3, "max_extra_length": 300}
PARSING_FILE = "parsing.json"


def _settings_file(path):
    """The `parsing.json` path for a run folder, `.keras` file or checkpoint prefix."""
    path = os.fspath(path)
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    if os.path.basename(folder) == "checkpoints":
        folder = os.path.dirname(folder)
    return folder, os.path.join(folder, PARSING_FILE)


def read_parsing_settings(path):
    """The `Linearizer` recorded in `parsing.json` of a run folder (or beside a model file).

    Args:
        path: a run folder, `.keras` file or checkpoint prefix; or a list of them (an
            ensemble), which must all record the same linearization.

    Raises:
        UserInputError: when the folder does not exist, or has no `parsing.json` (it is not
            a parsing run: guessing the linearization would turn a translation model's
            output into confident nonsense trees), or that file cannot be read, or the
            models of an ensemble were trained on different linearizations.
    """
    if isinstance(path, (list, tuple)):
        linearizers = [read_parsing_settings(one) for one in path]
        for one, linearizer in zip(path[1:], linearizers[1:]):
            if linearizer != linearizers[0]:
                raise UserInputError(
                    f"the ensemble's models were trained on different linearizations "
                    f"({os.fspath(path[0])!r}: {linearizers[0].to_dict()}, "
                    f"{os.fspath(one)!r}: {linearizer.to_dict()}): ensemble parsers of one "
                    "linearization"
                )
        return linearizers[0]
    path = os.fspath(path)
    folder, settings = _settings_file(path)
    # A checkpoint prefix RUN/checkpoints/ckpt-N names no file itself, only ckpt-N.index.
    if not (os.path.exists(path) or os.path.exists(path + ".index")):
        raise UserInputError(
            f"{path!r} does not exist: give a parsing run folder (trained "
            "by pipelines/ptb_parsing.py), its .keras file or a checkpoint"
        )
    if not os.path.isfile(settings):
        raise UserInputError(
            f"{folder!r} has no {PARSING_FILE}, so it is not a parsing run (a translation run?)"
            f": train a parser with pipelines/ptb_parsing.py, or, for a model trained on "
            f"linearized trees by other means, write its {PARSING_FILE} (e.g. "
            f'{{"pos_tags": false, "closing_labels": true}}) or pass Parser.load(..., '
            f"linearizer=Linearizer(...))"
        )
    try:
        with open(settings, encoding="utf-8") as file:
            return Linearizer.from_dict(json.load(file))
    except (OSError, ValueError, TypeError) as error:
        raise UserInputError(f"cannot read the parsing settings {settings!r}: {error}") from None


def read_opening_penalty(path):
    """The opening penalty recorded in a run's `parsing.json` (0.0 when none is).

    Args:
        path: as `read_parsing_settings`; for an ensemble, the runs must record one
            penalty. A model without `parsing.json` beside it records none.

    Raises:
        UserInputError: when the models of an ensemble record different penalties, or the
            file cannot be read.
    """
    if isinstance(path, (list, tuple)):
        penalties = [read_opening_penalty(one) for one in path]
        if len(set(penalties)) > 1:
            raise UserInputError(
                f"the ensemble's runs record different opening penalties ({penalties}): give "
                "one (opening_penalty=..., --opening-penalty)"
            )
        return penalties[0]
    settings = _settings_file(path)[1]
    if not os.path.isfile(settings):
        return 0.0
    try:
        with open(settings, encoding="utf-8") as file:
            value = json.load(file).get("opening_penalty", 0.0)
        return float(value)
    except (OSError, ValueError, TypeError, AttributeError) as error:
        raise UserInputError(f"cannot read the opening penalty in {settings!r}: {error}") from None


def write_parsing_settings(folder, linearizer, opening_penalty=None):
    """Writes `parsing.json`: the linearization, and the opening penalty when given."""
    from keras_transformer.files import atomic_write

    settings = linearizer.to_dict()
    if opening_penalty is not None:
        settings["opening_penalty"] = float(opening_penalty)
    with atomic_write(os.path.join(folder, PARSING_FILE)) as file:
        json.dump(settings, file, indent=2, sort_keys=True)


def _words(sentence, index):
    if isinstance(sentence, str):
        words = sentence.split()
    elif isinstance(sentence, (list, tuple)) and all(isinstance(w, str) for w in sentence):
        words = list(sentence)
    else:
        raise TypeError(
            f"sentences[{index}] must be a list of words or a string of "
            f"space-separated words, got {type(sentence).__name__}"
        )
    return [escape_brackets(word) for word in words]


class Parser:
    """A constituency parser: a translation model from words to linearized trees.

    Args:
        translator: a `keras_transformer.Translator` (its search settings are used).
        linearizer: the `Linearizer` the model was trained with.
        constrained: search only well-formed trees over the input words
            (`constrained_decoding.TreeConstrainedDecoder`; default). False searches freely
            and repairs the outputs afterwards, as Vinyals et al.; it scored 23-24 dev F1
            below the constrained search, which takes 1.2-1.4x its time
            (docs/decisions.md#constrained-parsing).
        merge_same_label_unaries: merge a constituent whose only child has its label, `(NP
            (NP the dog))` -> `(NP the dog)` (`trees.merge_same_label_unaries`; default).
            The treebank has 5 in its 273 WSJ dev trees, a model may write hundreds, and
            merging them adds dev F1 (docs/decisions.md#merge-same-label-unaries).
        opening_penalty: subtracted from each opening bracket's log-probability in the
            constrained search (`constrained_decoding.TreeConstrainedDecoder`; default 0).

    Example:
    >>> parser = Parser.load("runs/ptb_parsing_wsj")  # doctest: +SKIP
    >>> [str(tree) for tree in parser.parse(["It works ."])]  # doctest: +SKIP
    ['(TOP (S (NP (XX It)) (VP (XX works)) (XX .)))']
    """

    def __init__(
        self,
        translator,
        linearizer=None,
        constrained=True,
        merge_same_label_unaries=True,
        opening_penalty=0.0,
    ):
        self.linearizer = linearizer or Linearizer()
        self.constrained = constrained
        self.merge_same_label_unaries = merge_same_label_unaries
        self.opening_penalty = float(opening_penalty)
        if constrained:
            translator = constrain_translator(translator, self.linearizer, self.opening_penalty)
        elif self.opening_penalty:
            raise ValueError(
                "opening_penalty applies to the constrained search: give "
                "constrained=True, or opening_penalty=0"
            )
        self.translator = translator
        self.last_repairs = collections.Counter()
        self.last_repaired = 0

    @classmethod
    def load(
        cls,
        path,
        beam_size=PAPER_DECODING["beam_size"],
        alpha=PAPER_DECODING["alpha"],
        max_extra_length=PAPER_DECODING["max_extra_length"],
        linearizer=None,
        constrained=True,
        merge_same_label_unaries=True,
        opening_penalty=None,
        **options,
    ):
        """A parser for a run folder, a `.keras` file or a checkpoint prefix.

        Args:
            path: see `keras_transformer.Translator.load`; a list of them is an ensemble
                (one vocabulary and one linearization; the mean of the models'
                log-probabilities at each step, constrained as one model's).
            beam_size, alpha, max_extra_length: the search (default: section 6.3's).
            linearizer: default: the run's `parsing.json`.
            constrained, merge_same_label_unaries: see `Parser` (default True).
            opening_penalty: see `Parser`; default: the one the run's `parsing.json` records
                (its pipeline's dev parse used it), else 0 (and 0 when not constrained).
            **options: other `Translator` arguments (batch_size, ...).

        Raises:
            UserInputError: when `linearizer` is not given and the run has no
                `parsing.json` (checked before the model is loaded).
        """
        from keras_transformer.translation import Translator

        if linearizer is None:
            linearizer = read_parsing_settings(path)
        if opening_penalty is None:
            opening_penalty = read_opening_penalty(path) if constrained else 0.0
        translator = Translator.load(
            path, beam_size=beam_size, alpha=alpha, max_extra_length=max_extra_length, **options
        )
        return cls(
            translator,
            linearizer,
            constrained=constrained,
            merge_same_label_unaries=merge_same_label_unaries,
            opening_penalty=opening_penalty,
        )

    def parse_with_repairs(self, sentences):
        """`Delinearized` results (tree and repairs) for `sentences`."""
        if isinstance(sentences, str):
            raise TypeError(
                "sentences must be a list (of word lists or strings), got one str; "
                "wrap it in a list"
            )
        words = [_words(sentence, i) for i, sentence in enumerate(sentences)]
        sequences = self.translator.translate([" ".join(w) for w in words])
        results = [
            self.linearizer.delinearize(sequence, sentence_words)
            for sequence, sentence_words in zip(sequences, words)
        ]
        if self.merge_same_label_unaries:
            results = [
                Delinearized(merge_same_label_unaries(result.tree), result.repairs)
                for result in results
            ]
        self.last_repairs = collections.Counter(r for result in results for r in result.repairs)
        self.last_repaired = sum(result.repaired for result in results)
        return results

    def parse(self, sentences):
        """Trees (`parsing.trees.Tree`, TOP-rooted) for a list of tokenized sentences.

        Args:
            sentences: each a list of words, or a string of space-separated words (PTB
                tokenization, as the treebank).

        Returns:
            One `Tree` per sentence, in order; an empty sentence gives `(TOP)`.
        """
        return [result.tree for result in self.parse_with_repairs(sentences)]

    __call__ = parse


def constrain_translator(translator, linearizer, opening_penalty=0.0):
    """`translator` searching only well-formed trees over its input words (a copy), with
    `opening_penalty` off each opening bracket's log-probability.

    Raises:
        TypeError: for a translator without a decoder and SentencePiece vocabulary (a
            stand-in): give `constrained=False`.
    """
    from keras_transformer.parsing.constrained_decoding import (
        TreeConstrainedDecoder,
        TreeConstraint,
    )

    if not all(hasattr(translator, name) for name in ("decoder", "vocabulary", "with_decoder")):
        raise TypeError(
            f"constrained parsing needs a keras_transformer Translator, got a "
            f"{type(translator).__name__}: pass constrained=False"
        )
    constraint = TreeConstraint.for_vocabulary(translator.vocabulary, linearizer)
    return translator.with_decoder(
        TreeConstrainedDecoder(
            translator.decoder, constraint, translator.max_extra_length, opening_penalty
        )
    )


def parse(sentences, model, **options):
    """Parses tokenized sentences with a trained parser (beam 21, alpha 0.3, input + 300).

    Args:
        sentences: a list of word lists (or of space-separated strings).
        model: a `Parser`, or a path (run folder, `.keras` file, checkpoint prefix).
        **options: `Parser.load` arguments (beam_size, alpha, ...), when `model` is a path.

    Returns:
        A list of `Tree`s.

    Example:
    >>> trees = parse([["It", "works", "."]], model="runs/ptb_parsing_wsj")  # doctest: +SKIP
    >>> str(trees[0])  # doctest: +SKIP
    '(TOP (S (NP (XX It)) (VP (XX works)) (XX .)))'
    """
    parser = model if isinstance(model, Parser) else Parser.load(model, **options)
    return parser.parse(sentences)
