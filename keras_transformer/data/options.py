"""The tf.data options that every dataset of the package carries."""

import tensorflow as tf


def without_autotune_thread(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """`dataset` with tf.data's autotuning off, so that its iterators start no tuning thread.

    Deleting an iterator whose tuning thread runs can wait for the thread's next wake, up to a
    minute (docs/decisions.md#tf-data-autotune-off). `tf.data.AUTOTUNE` arguments then take
    tf.data's defaults: min(16, cores) parallel calls, prefetch buffers sized as they fill.

    Args:
        dataset: any `tf.data.Dataset`.

    Example:
        >>> import tensorflow as tf
        >>> dataset = without_autotune_thread(tf.data.Dataset.range(3))
        >>> dataset.options().autotune.enabled
        False
    """
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)
