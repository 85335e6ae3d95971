"""Token-exact gradient accumulation: the paper's ~25000-token update on any number of devices.

Batches are made of tokens, not sentences (5.1), so every target token should weigh the same
in an update, whatever micro-batch or replica it landed on. For an update made of micro-batches
i = 1..N on replicas r = 1..R, with S_ir the summed (label-smoothed) loss over the real target
tokens of micro-batch i on replica r and n_ir their number:

    gradient = sum_ir grad(S_ir) / sum_ir n_ir

Keras's own `gradient_accumulation_steps` (and a plain per-batch mean under MirroredStrategy)
instead averages per-batch means uniformly, sum_ir grad(S_ir / n_ir) / (N R), which gives the
tokens of short, padded micro-batches more weight than those of full ones.

Here one `train_step` receives all N micro-batches of an update at once, as a tuple built by
`group_micro_batches`; the token count is summed over the micro-batches and all-reduced over
the replicas first, then each micro-batch contributes grad(S_ir / total), and the optimizer's
all-reduce SUM over replicas completes the sum. No accumulator variables, no conditional
update: one `fit` step is one optimizer update, so step counters, the learning-rate schedule
and checkpoints all count updates.
"""

import tensorflow as tf


def group_micro_batches(dataset, accumulation_steps):
    """Groups consecutive `(inputs, labels)` batches into tuples of `accumulation_steps`.

    Micro-batches keep their own shapes (token-budget batches differ in batch size and
    length); a final group with fewer than `accumulation_steps` batches is dropped, as
    training datasets repeat forever.

    Args:
        dataset: a `tf.data.Dataset` of `({"source_ids", "target_ids"}, labels)`.
        accumulation_steps: micro-batches per optimizer update.

    Returns:
        A dataset whose elements are tuples of `accumulation_steps` `(inputs, labels)` pairs,
        the input of `TrainingModel.train_step`.

    Example:
        >>> grouped = group_micro_batches(batches, 4)  # doctest: +SKIP
        >>> len(next(iter(grouped)))  # doctest: +SKIP
        4
    """
    if accumulation_steps < 1:
        raise ValueError(f"accumulation_steps must be at least 1, got {accumulation_steps}")
    if accumulation_steps == 1:
        return dataset.map(lambda inputs, labels: ((inputs, labels),))

    def to_micro_batches(inputs, labels):
        # `ragged_batch` stacks micro-batches of different shapes as ragged tensors
        # [accumulation_steps, batch, length]; every row of a micro-batch has its length, so
        # `to_tensor` gives each one back exactly. (Not `window` + `get_single_element`:
        # that op is stateful, and a tf.data iterator holding it cannot be checkpointed.)
        return tuple(
            ({name: value[i].to_tensor() for name, value in inputs.items()}, labels[i].to_tensor())
            for i in range(accumulation_steps)
        )

    return dataset.ragged_batch(accumulation_steps, drop_remainder=True).map(to_micro_batches)


def count_real_tokens(labels, pad_id=0):
    """Number of non-pad labels, float32: the denominator of the token-mean loss."""
    return tf.reduce_sum(tf.cast(tf.not_equal(labels, pad_id), tf.float32))
