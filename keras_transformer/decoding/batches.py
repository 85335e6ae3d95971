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

Example:
>>> token_batches([3, 9, 5, 2], batch_tokens=12)
[[1], [2, 0], [3]]
"""

from keras_transformer.decoding.settings import check_decoding_settings


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
