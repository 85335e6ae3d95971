"""Batching by approximate length under a token budget (paper section 5.1).

"Sentence pairs were batched together by approximate sequence length. Each training batch
contained a set of sentence pairs containing approximately 25000 source tokens and 25000 target
tokens." Here pairs go to buckets by the longer of their two sides, with tensor2tensor's bucket
boundaries (8, 9, 10, ... growing by x1.1), and each bucket's batch size is chosen so that a
batch never holds more than the token budget, padding included, on the source side and on the
target side alike:

    batch_size(bucket) = token_budget // longest_length_in_bucket

A batch is padded to its own longest sequence, which is at most the bucket's longest length, so
batch_size * padded_length <= token_budget for both sides. Narrow buckets keep padding low.

Under a distribution strategy the budget is per replica: the global batch holds
`num_replicas * (token_budget // longest)` pairs, a multiple of the replica count, so that every
full batch splits evenly and each replica's share again respects the budget.
"""

from collections.abc import Sequence

import tensorflow as tf

from keras_transformer.errors import UserInputError

# The features a bucketed element carries; all are 1-D int32 id sequences, padded with pad_id.
SEQUENCE_FEATURES = ("source_ids", "target_ids", "labels")


def bucket_boundaries(max_length: int, min_length: int = 8, growth: float = 1.1) -> list:
    """Bucket boundaries as in tensor2tensor: `min_length`, then growing by `growth` (at least 1).

    Bucket i holds lengths in `[boundaries[i-1], boundaries[i])`; the returned list ends with
    `max_length + 1`, so the last bucket ends exactly at `max_length`.

    Args:
        max_length: the longest sequence the pipeline keeps.
        min_length: the first boundary: all sequences shorter than it share the first bucket.
        growth: each boundary is `max(previous + 1, int(previous * growth))`.

    Returns:
        Increasing boundaries; the last is `max_length + 1`.

    Example:
        >>> bucket_boundaries(16)
        [8, 9, 10, 11, 12, 13, 14, 15, 16, 17]
        >>> bucket_boundaries(64)[-5:]
        [46, 50, 55, 60, 65]
    """
    if max_length < 1:
        raise UserInputError(f"max_length must be at least 1, got {max_length}")
    if growth <= 1.0:
        raise UserInputError(f"bucket growth must be above 1.0, got {growth}")
    boundaries = []
    boundary = min_length
    while boundary <= max_length:
        boundaries.append(boundary)
        boundary = max(boundary + 1, int(boundary * growth))
    boundaries.append(max_length + 1)
    return boundaries


def bucket_batch_sizes(boundaries: Sequence[int], token_budget: int, num_replicas: int = 1) -> list:
    """Pairs per batch in each bucket, so that batches respect a per-replica token budget.

    Args:
        boundaries: bucket boundaries as from `bucket_boundaries`; bucket i's longest sequence
            is `boundaries[i] - 1`.
        token_budget: most tokens (padding included) per replica per side (source, target).
        num_replicas: replicas the global batch is split across.

    Returns:
        `len(boundaries) + 1` batch sizes, each a positive multiple of `num_replicas`; the last
        is for the overflow bucket (lengths >= the last boundary), which the length filter keeps
        empty.

    Raises:
        UserInputError: when even one pair of the longest length would exceed the budget.

    Example:
        >>> bucket_batch_sizes([8, 12, 17], token_budget=64, num_replicas=2)
        [18, 10, 8, 2]
    """
    if num_replicas < 1:
        raise UserInputError(f"num_replicas must be at least 1, got {num_replicas}")
    longest = boundaries[-1] - 1
    if token_budget < longest:
        raise UserInputError(
            f"a token budget of {token_budget} per replica cannot hold one pair of the maximum "
            f"length {longest}: raise the budget to at least {longest} or lower max_length"
        )
    sizes = [
        num_replicas * (token_budget // (boundary - 1)) if boundary > 1 else num_replicas
        for boundary in boundaries
    ]
    return sizes + [num_replicas]


def sequence_length(element) -> tf.Tensor:
    """The length a pair is bucketed by: the longer of its source and its target sequence."""
    return tf.maximum(tf.shape(element["source_ids"])[0], tf.shape(element["labels"])[0])


def token_budget_batches(
    dataset: tf.data.Dataset,
    *,
    token_budget: int,
    max_length: int,
    num_replicas: int = 1,
    boundaries: Sequence[int] = None,
    pad_to_bucket_boundary: bool = False,
    pad_id: int = 0,
) -> tf.data.Dataset:
    """Groups pairs of similar length into padded batches that respect a token budget.

    Like `Dataset.bucket_by_sequence_length`, built on `group_by_window`, but it also accepts
    the ragged elements that `unbatch()` of a ragged batch gives, so that tokenizing and
    filtering can work on whole batches.

    Args:
        dataset: elements are dicts of 1-D int32 sequences `source_ids`, `target_ids`,
            `labels` no longer than `max_length` (filter first: longer pairs would exceed the
            budget).
        token_budget: most tokens per replica per side, padding included.
        max_length: the longest sequence in `dataset`.
        num_replicas: replicas in sync; the budget is per replica (see module docstring).
        boundaries: bucket boundaries (default: `bucket_boundaries(max_length)`); the last one
            must exceed `max_length`.
        pad_to_bucket_boundary: pad every batch to its bucket's longest length (static shapes
            for XLA/TPU, more padding) instead of to its own longest sequence.
        pad_id: the id that pads (the vocabulary's `pad_id`).

    Returns:
        A dataset of dicts of [batch, length] int32 tensors padded with `pad_id`. Buckets emit
        full batches as they fill; at the end of a finite input, partial batches follow.

    Example:
        >>> pairs = tf.data.Dataset.from_tensor_slices(
        ...     {"source_ids": [[5, 3]], "target_ids": [[2, 6]], "labels": [[6, 3]]})
        >>> batch = next(iter(token_budget_batches(pairs, token_budget=64, max_length=16)))
        >>> batch["labels"].numpy().tolist()
        [[6, 3]]
    """
    boundaries = list(boundaries or bucket_boundaries(max_length))
    if boundaries[-1] <= max_length:
        raise UserInputError(
            f"the last bucket boundary ({boundaries[-1]}) must exceed max_length ({max_length})"
        )
    batch_sizes = bucket_batch_sizes(boundaries, token_budget, num_replicas)
    boundaries_tensor = tf.constant(boundaries, tf.int32)
    sizes_tensor = tf.constant(batch_sizes, tf.int64)
    # Bucket i's longest length; the overflow bucket (never filled) gets max_length.
    uppers_tensor = tf.constant([b - 1 for b in boundaries] + [max_length], tf.int32)

    def bucket_of(element):
        # The first bucket whose boundary exceeds the length, as bucket_by_sequence_length.
        length = tf.reshape(sequence_length(element), [1])
        return tf.cast(tf.searchsorted(boundaries_tensor, length, side="right")[0], tf.int64)

    def to_dense(bucket, batch):
        dense = {}
        for name in SEQUENCE_FEATURES:
            values = batch[name]
            if isinstance(values, tf.RaggedTensor):
                values = values.to_tensor(pad_id)
            if pad_to_bucket_boundary:
                width = tf.gather(uppers_tensor, bucket) - tf.shape(values)[1]
                values = tf.pad(values, [[0, 0], [0, width]], constant_values=pad_id)
            dense[name] = values
        return dense

    def batch_window(bucket, window):
        return window.ragged_batch(tf.gather(sizes_tensor, bucket)).map(
            lambda batch: to_dense(bucket, batch)
        )

    return dataset.group_by_window(
        key_func=bucket_of,
        reduce_func=batch_window,
        window_size_func=lambda bucket: tf.gather(sizes_tensor, bucket),
    )
