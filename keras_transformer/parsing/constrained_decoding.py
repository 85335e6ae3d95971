"""Constrained decoding for parsing: every output is a well-formed tree over the input words.

Vinyals et al. (2015) mend what the decoder gets wrong after the search, as
`Linearizer.delinearize` does. Here the search cannot go wrong in the first place: at each
step the tokens that would break the tree get no probability, so the beam spends its width on
bracketings of exactly the input words, not on hypotheses that drop a word or close the
wrong bracket (the commonest faults of unconstrained parses). What each decoder row (one
hypothesis) may emit next:

- a word: with word slots (`Linearizer(word_slots=True)`) only the next piece of the source
  (the decoder copies the input, piece by piece); otherwise a slot token (`XX`, or a POS tag
  with `pos_tags=True`); only inside an open constituent and while words remain. Between the
  pieces of one word nothing else may come;
- `(LABEL`: while words remain (so that no constituent is left empty), at most `max_depth`
  deep and `max_openings_in_a_row` in a row (a model that would rather not emit the next
  word otherwise fills the output with unary chains, `(NX (NX (NX ...`), and only if the
  output cap (input length + `max_extra_length`, as the search's) still has room for the
  remaining words, the closing brackets and eos;
- `)LABEL`: the innermost open constituent's closing (its own label when closings carry
  labels), never right after its opening, and the outermost only once every word is placed:
  one constituent under TOP, as in every tree of the WSJ sample;
- eos: once that constituent is closed.

Allowed tokens keep their model log-probabilities (no renormalization, as `forbid_tokens`), so
scores stay log P(Y|X) of the unconstrained model, less `opening_penalty` per opening bracket
when one is given: the parser's analogue of a word insertion penalty, for a model that
writes more brackets than the gold has; it is chosen on dev and defaults to 0, as the
recipes' models need none (docs/decisions.md#opening-penalty). Renormalizing over the allowed
tokens did worse (docs/decisions.md#constrained-no-renormalization). This search added
23-24 dev F1 over the free search and its repair, at 1.2-1.4x the time
(docs/decisions.md#constrained-parsing).

Written here because no library does it for a compiled Keras 3 search: keras-hub's samplers
take no per-step token mask, and prefix-constrained decoding elsewhere (Hugging Face's
`prefix_allowed_tokens_fn`) calls Python at every step. This is a decoder wrapper in
`keras.ops`: its per-hypothesis state (words placed, depth, the stack of closings, openings in
a row) rides in the decoder's `dynamic` state, which beam search already reorders with the
caches, so greedy search, beam search and ensembles take it unchanged, compiled.

Example:
>>> constraint = TreeConstraint(pieces, Linearizer(word_slots=True))  # doctest: +SKIP
>>> decoder = TreeConstrainedDecoder(model, constraint, max_extra_length=300)  # doctest: +SKIP
>>> result = BeamSearch(beam_size=21, alpha=0.3, max_extra_length=300)(decoder, source_ids)
... # doctest: +SKIP
"""

import numpy as np
from keras import ops

from keras_transformer.decoding.incremental import NEG_INF, as_decoder
from keras_transformer.decoding.length_penalty import max_output_lengths
from keras_transformer.parsing.linearization import WORD_SLOT

# SentencePiece's word-start mark: bracket and slot tokens are user-defined pieces "▁(NP".
SPACE = "\u2581"


class TreeConstraint:
    """The token tables of the tree rules, for one vocabulary and linearization.

    Args:
        pieces: the vocabulary's pieces, in id order (SentencePiece's `id_to_piece`); ids past
            the list (a model vocabulary rounded up) are never allowed as brackets or slots.
        linearizer: the `Linearizer` the parser was trained with.
        max_depth: the deepest nesting allowed (the WSJ sample's deepest tree is far less).
        max_openings_in_a_row: openings allowed one after another. 4: all but 26 of the
            3396 linearized WSJ training trees have at most 4 (the most is 6), and 4 parsed
            the dev sentences better than 3 or 6 (docs/decisions.md#openings-in-a-row).

    Raises:
        ValueError: when the vocabulary has no opening bracket with its closing one, or no
            slot token where the linearization needs one.

    Example:
    >>> from keras_transformer.parsing.linearization import Linearizer
    >>> pieces = ["<pad>", "<unk>", "<s>", "</s>", "\u2581(S", "\u2581)S", "\u2581XX"]
    >>> constraint = TreeConstraint(pieces, Linearizer())
    >>> constraint.opening.nonzero()[0].tolist(), int(constraint.closing[4])
    ([4], 5)
    >>> constraint.slot.nonzero()[0].tolist()
    [6]
    """

    def __init__(self, pieces, linearizer, max_depth=64, max_openings_in_a_row=4):
        pieces = [str(piece) for piece in pieces]
        index = {piece: i for i, piece in enumerate(pieces)}
        size = len(pieces)
        self.linearizer = linearizer
        self.max_depth = int(max_depth)
        self.max_openings_in_a_row = int(max_openings_in_a_row)
        self.copies_words = linearizer.word_slots
        self.word_start = np.array([p.startswith(SPACE) for p in pieces], bool)
        tokens = [p[1:] if p.startswith(SPACE) else None for p in pieces]
        self.closing = np.full((size,), -1, "int32")  # opening id -> its closing's id
        self.closes = np.array([t is not None and t.startswith(")") for t in tokens], bool)
        for i, token in enumerate(tokens):
            if token is not None and token.startswith("(") and len(token) > 1:
                closing = ")" + token[1:] if linearizer.closing_labels else ")"
                self.closing[i] = index.get(SPACE + closing, -1)
        # An opening whose closing is not in the vocabulary could never be closed.
        self.opening = self.closing >= 0
        if not self.opening.any():
            raise ValueError(
                "the vocabulary has no bracket pieces ('\u2581(NP' with its "
                "closing): it is not a parsing vocabulary"
            )
        brackets = self.closes | np.array([t is not None and t.startswith("(") for t in tokens])
        if linearizer.word_slots:
            self.slot = np.zeros((size,), bool)  # words are copied from the source instead
        elif linearizer.pos_tags:
            # POS tags are whole pieces; any whole-word piece that is no bracket may be one.
            self.slot = self.word_start & ~brackets
        else:
            self.slot = np.array([t == WORD_SLOT for t in tokens], bool)
        if not linearizer.word_slots and not self.slot.any():
            raise ValueError(
                f"the vocabulary has no word slot piece ('{SPACE}{WORD_SLOT}' or "
                "POS tags) for this linearization"
            )

    def padded(self, size):
        """The tables as tensors of `size` entries (the model's vocabulary size)."""

        def pad(table, value):
            table = table[:size]
            return np.concatenate([table, np.full((size - len(table),), value, table.dtype)])

        return {
            "word_start": ops.convert_to_tensor(pad(self.word_start, False)),
            "opening": ops.convert_to_tensor(pad(self.opening, False)),
            "closing": ops.convert_to_tensor(pad(self.closing, -1)),
            "closes": ops.convert_to_tensor(pad(self.closes, False)),
            "slot": ops.convert_to_tensor(pad(self.slot, False)),
        }

    @classmethod
    def for_vocabulary(cls, vocabulary, linearizer, **options):
        """The constraint for a `SubwordVocabulary` (or a SentencePiece processor)."""
        processor = getattr(vocabulary, "processor", vocabulary)
        if not hasattr(processor, "id_to_piece"):
            raise TypeError(
                "constrained parsing needs the SentencePiece vocabulary's pieces; "
                f"got a {type(vocabulary).__name__}: pass constrained=False"
            )
        pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
        return cls(pieces, linearizer, **options)


class TreeConstrainedDecoder:
    """A decoder whose outputs can only be well-formed trees over the source's words.

    Args:
        decoder: a `Transformer` or a decoder (`IncrementalDecoder`, `EnsembleDecoder`).
        constraint: the `TreeConstraint` of the model's vocabulary and linearization.
        max_extra_length: the search's output allowance beyond the source length (the cap
            the constraint keeps room under); give the search's own.
        opening_penalty: subtracted from the log-probability of every opening bracket
            (default 0: the model's own scores); positive values give fewer, larger
            constituents, negative ones more.

    Example:
    >>> decoder = TreeConstrainedDecoder(model, constraint, max_extra_length=300)
    ... # doctest: +SKIP
    >>> greedy_search(decoder, source_ids, max_extra_length=300)  # doctest: +SKIP
    """

    def __init__(self, decoder, constraint, max_extra_length, opening_penalty=0.0):
        self.decoder = as_decoder(decoder)
        self.constraint = constraint
        self.max_extra_length = max_extra_length
        self.opening_penalty = float(opening_penalty)
        if not np.isfinite(self.opening_penalty):
            raise ValueError(f"opening_penalty must be a finite number, got {opening_penalty!r}")
        for field in ("vocab_size", "pad_id", "bos_id", "eos_id", "max_length"):
            setattr(self, field, getattr(self.decoder, field))
        self.tables = constraint.padded(self.vocab_size)
        if hasattr(self.decoder, "grow_state"):
            self.grow_state = self._grow_state

    @property
    def variables(self):
        return list(getattr(self.decoder, "variables", []))

    def initial_state(self, source_ids, max_length):
        static, dynamic = self.decoder.initial_state(source_ids, max_length)
        source_ids = ops.cast(source_ids, "int32")
        real = ops.logical_and(
            ops.not_equal(source_ids, self.pad_id), ops.not_equal(source_ids, self.eos_id)
        )
        if self.constraint.copies_words:
            units = ops.sum(ops.cast(real, "int32"), axis=1)  # pieces to copy
        else:
            starts = ops.logical_and(real, ops.take(self.tables["word_start"], source_ids))
            units = ops.sum(ops.cast(starts, "int32"), axis=1)  # words to give a slot
        caps, _ = max_output_lengths(
            source_ids, self.pad_id, self.max_extra_length, self.max_length
        )
        rows = ops.shape(source_ids)[0]
        state = (
            ops.zeros((rows,), "int32"),  # units placed
            ops.zeros((rows,), "int32"),  # open brackets
            ops.full((rows, self.constraint.max_depth), -1, "int32"),  # their closings
            ops.zeros((rows,), "int32"),
        )  # openings just before
        return (static, source_ids, units, caps), (dynamic, state)

    def _grow_state(self, dynamic, max_length):
        inner, state = dynamic
        return self.decoder.grow_state(inner, max_length), state

    def step(self, token_ids, static, dynamic, step):
        inner_static, source_ids, units, caps = static
        inner, (placed, depth, stack, opened_in_a_row) = dynamic
        tables = self.tables
        # The token fed in is the one chosen at the previous step (bos at step 0).
        token = ops.cast(token_ids[:, 0], "int32")
        opens = ops.take(tables["opening"], token)
        closes = ops.take(tables["closes"], token)
        if self.constraint.copies_words:
            special = ops.logical_or(
                ops.logical_or(token == self.bos_id, token == self.eos_id), token == self.pad_id
            )
            is_word = ops.logical_not(ops.logical_or(ops.logical_or(opens, closes), special))
        else:
            is_word = ops.take(tables["slot"], token)
        levels = ops.arange(self.constraint.max_depth)[None, :]
        push = ops.logical_and(opens[:, None], levels == depth[:, None])
        stack = ops.where(push, ops.take(tables["closing"], token)[:, None], stack)
        depth = ops.maximum(depth + ops.cast(opens, "int32") - ops.cast(closes, "int32"), 0)
        placed = placed + ops.cast(is_word, "int32")
        opened_in_a_row = ops.where(opens, opened_in_a_row + 1, 0)

        log_probs, inner = self.decoder.step(token_ids, inner_static, inner, step)
        allowed = self._allowed(
            source_ids, units, caps, placed, depth, stack, opened_in_a_row, step
        )
        if self.opening_penalty:
            log_probs = ops.where(
                tables["opening"][None, :],
                log_probs - ops.cast(self.opening_penalty, log_probs.dtype),
                log_probs,
            )
        log_probs = ops.where(allowed, log_probs, ops.cast(NEG_INF, log_probs.dtype))
        return log_probs, (inner, (placed, depth, stack, opened_in_a_row))

    def _allowed(self, source_ids, units, caps, placed, depth, stack, opened_in_a_row, step):
        """`[rows, vocab]` bool: the tokens each row may emit next (module docstring).

        Each rule is decided per row first; only then are they spread over the vocabulary:
        one comparison per single allowed token (the next piece, the innermost closing,
        eos) and one table for the openings (and slots), so that the mask costs a few passes
        over `[rows, vocab]` per step.
        """
        tables = self.tables
        left = units - placed
        words_left = left > 0
        may_place = ops.logical_and(words_left, depth > 0)
        # After an opening at this step (output length step + 1): the words left, every
        # closing (depth + 1) and eos must still fit under the cap.
        room = step + 1 + left + depth + 2 <= caps
        may_open = ops.logical_and(
            ops.logical_and(words_left, room),
            ops.logical_and(
                depth < self.constraint.max_depth,
                opened_in_a_row < self.constraint.max_openings_in_a_row,
            ),
        )
        may_close = ops.logical_and(
            ops.logical_and(depth > 0, opened_in_a_row == 0),
            ops.logical_or(depth > 1, ops.logical_not(words_left)),
        )
        may_end = ops.logical_and(depth == 0, ops.logical_not(words_left))
        if self.constraint.copies_words:
            last = ops.shape(source_ids)[1] - 1
            next_piece = ops.take_along_axis(
                source_ids, ops.minimum(placed, last)[:, None], axis=1
            )[:, 0]
            # Between the pieces of one word only its next piece.
            within_word = ops.logical_and(
                ops.logical_and(words_left, placed > 0),
                ops.logical_not(ops.take(tables["word_start"], next_piece)),
            )
            may_place = ops.logical_or(may_place, within_word)
            outside = ops.logical_not(within_word)
            may_open = ops.logical_and(may_open, outside)
            may_close = ops.logical_and(may_close, outside)
            may_end = ops.logical_and(may_end, outside)
            singles = [ops.where(may_place, next_piece, -1)]
        else:
            singles = []
        level = ops.clip(depth - 1, 0, self.constraint.max_depth - 1)
        innermost = ops.take_along_axis(stack, level[:, None], axis=1)[:, 0]
        # (-1: an opening without a closing piece, which only an unconstrained step emits.)
        may_close = ops.logical_and(may_close, innermost >= 0)
        singles += [ops.where(may_close, innermost, -1), ops.where(may_end, self.eos_id, -1)]
        ids = ops.arange(self.vocab_size)[None, :]
        allowed = ops.logical_and(tables["opening"][None, :], may_open[:, None])
        if not self.constraint.copies_words:
            allowed = ops.logical_or(
                allowed, ops.logical_and(tables["slot"][None, :], may_place[:, None])
            )
        for token in singles:
            allowed = ops.logical_or(allowed, ids == token[:, None])
        # A cap too short for any tree (max_extra_length < 2) leaves nothing: then the
        # decoder goes unconstrained for that step and the repair mends its output.
        stuck = ops.logical_not(
            ops.logical_or(ops.logical_or(may_place, may_open), ops.logical_or(may_close, may_end))
        )
        return ops.logical_or(allowed, stuck[:, None])
