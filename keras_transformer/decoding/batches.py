"""Inference batches: sentences grouped by length, counted in sentences or under a token budget.

What a batch costs is its padded block: `sentences x width`, where `width` is the longest
source of the batch rounded up to the length bucket (`length_multiple`, capped at the model's
`max_length`), since every row is padded to it and the encoder, and the cross-attention of
each decoding step, work on the whole block. fairseq's `--max-tokens` (`batch_by_size`) and
CTranslate2's `max_batch_size` with `batch_type="tokens"` (`rebatch_input`) count the same
padded block, `(sentences + 1) x longest > budget` closing a batch, though on the raw longest
length. Neither multiplies the budget by the beam, and neither does this: a beam search
decodes `sentences x beam_size` rows, so its decoder memory grows with the beam at a fixed
budget.

Sentences are sorted longest first (stable, so equal lengths keep input order) and taken in
that order; a sentence whose width alone is over the budget makes a batch of its own. The
caller puts the outputs back in input order.

A token budget gives batches of many sizes, and a compiled search is traced once per batch
shape: `padded_rows` rounds a batch's row count up to a power of two (at most the full size
of its width, so never over the budget), which bounds the shapes to a few per width.

`BatchPlan` puts these together for a `Translator`: the groups of a call, the rows searched
for each and their padded block of ids.

Example:
>>> token_batches([3, 9, 5, 2], batch_tokens=12)
[[1], [2, 0], [3]]
"""

import numpy as np

from keras_transformer.decoding.settings import check_decoding_settings


def sequence_lengths(sequences):
    """Each sequence's length, None for None (an empty input, which no batch holds)."""
    return [None if ids is None else len(ids) for ids in sequences]


def padded_width(length, length_multiple=1, max_length=None):
    """The padded length of a batch whose longest sentence has `length` tokens."""
    width = -(-length // length_multiple) * length_multiple
    return width if max_length is None else min(width, max_length)


def _longest_first(lengths):
    """Indices of the entries that are not None, longest first (stable)."""
    return sorted((i for i, n in enumerate(lengths) if n is not None), key=lambda i: -lengths[i])


def sentence_batches(lengths, batch_size):
    """Indices grouped `batch_size` at a time in longest-first order; None entries (empty
    inputs) are left out."""
    order = _longest_first(lengths)
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def token_batches(lengths, batch_tokens, batch_size=None, length_multiple=1, max_length=None):
    """Indices grouped in longest-first order so that each batch's padded block
    (`sentences x padded_width(longest)`) is at most `batch_tokens`.

    Args:
        lengths: tokens per sentence (eos included); None entries are left out.
        batch_tokens: the budget, an integer >= 1.
        batch_size: at most this many sentences per batch as well (None: no cap).
        length_multiple, max_length: how the longest length is padded (`padded_width`).

    Returns:
        A list of index lists; a sentence over the budget on its own is a batch alone.

    Example:
    >>> token_batches([4, 4, 4], batch_tokens=8, length_multiple=4)
    [[0, 1], [2]]
    """
    check_decoding_settings(batch_tokens=batch_tokens)
    batches, batch, width = [], [], 0
    for i in _longest_first(lengths):
        if not batch:
            width = padded_width(lengths[i], length_multiple, max_length)
        elif (len(batch) + 1) * width > batch_tokens or len(batch) == batch_size:
            batches.append(batch)
            batch, width = [], padded_width(lengths[i], length_multiple, max_length)
        batch.append(i)
    if batch:
        batches.append(batch)
    return batches


def full_rows(width, batch_tokens, batch_size=None):
    """The most sentences a batch of `width` holds under the budget (and `batch_size`)."""
    rows = max(batch_tokens // width, 1)
    return rows if batch_size is None else min(rows, batch_size)


def padded_rows(indices, width, batch_tokens, batch_size=None):
    """`indices` with its last entry repeated up to the next power of two rows, at most
    `full_rows`: the extra rows are searched and their outputs dropped.

    Repeating a real sentence, not an empty one, adds no decoding steps (a copy finishes when
    its original does) and keeps the batch's width.

    Example:
    >>> padded_rows([7, 4, 5], width=8, batch_tokens=64)
    [7, 4, 5, 5]
    """
    count = len(indices)
    rows = min(1 << (count - 1).bit_length(), full_rows(width, batch_tokens, batch_size))
    return list(indices) + [indices[-1]] * max(rows - count, 0)


class BatchPlan:
    """How a `Translator` cuts one call's inputs into the batches of its compiled search:
    which sentences go together (`groups`), the rows searched for a group (`rows`: under a
    token budget, padded to a few row counts) and their block of ids (`block`).

    Args:
        batch_size: sentences per batch (with `batch_tokens`, at most this many).
        batch_tokens: the padded-token budget of a batch, or None to count sentences.
        length_multiple: block widths are rounded up to a multiple of it (fewer shapes).
        max_length: the model's positions: no block is wider.
        pad_id: the id that pads a block.

    Example:
    >>> plan = BatchPlan(batch_size=32, batch_tokens=12, pad_id=0)
    >>> plan.groups([3, 9, 5, 2])
    [[1], [2, 0], [3]]
    >>> plan.block([[5, 6], [7]], plan.rows([0, 1], [2, 1])).tolist()
    [[5, 6], [7, 0]]
    """

    def __init__(self, batch_size, batch_tokens=None, length_multiple=1, max_length=None, pad_id=0):
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self.length_multiple = length_multiple
        self.max_length = max_length
        self.pad_id = pad_id

    def groups(self, lengths):
        """Indices of the sentences of `lengths` (None: an empty input, in no group), grouped
        longest first: `batch_size` at a time, or under the `batch_tokens` budget."""
        if self.batch_tokens is None:
            return sentence_batches(lengths, self.batch_size)
        return token_batches(
            lengths, self.batch_tokens, self.batch_size, self.length_multiple, self.max_length
        )

    def _width(self, longest):
        return padded_width(longest, self.length_multiple, self.max_length)

    def rows(self, indices, lengths):
        """The rows to search for the group `indices`: with a token budget, padded to a
        bucketed row count (`padded_rows`), so that a compiled search sees few batch shapes."""
        if self.batch_tokens is None:
            return indices
        width = self._width(max(lengths[i] for i in indices))
        return padded_rows(indices, width, self.batch_tokens, self.batch_size)

    def block(self, sequences, rows):
        """`[len(rows), width]` int32 ids of `sequences[i]` for i in `rows`, padded with
        `pad_id` to the bucketed width (`padded_width`) of the longest."""
        width = self._width(max(len(sequences[i]) for i in rows))
        block = np.full((len(rows), width), self.pad_id, "int32")
        for row, i in enumerate(rows):
            block[row, : len(sequences[i])] = sequences[i]
        return block
