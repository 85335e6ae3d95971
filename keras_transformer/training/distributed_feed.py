"""The training data of a tf.distribute run, from an iterator that checkpoints can hold.

TensorFlow 2.21's distributed iterators (what `fit` makes of a dataset under a strategy) are
not trackable: a checkpoint cannot hold their position, and a restart would have to replay the
data stream up to it. `CheckpointableFeed` instead reads the batches with a plain
`tf.data.Iterator` on the host (trackable) and hands them to `fit` through a generator. The
distributed input prefetches: some batches have left the host iterator but are not trained on
yet when a checkpoint is written. The feed keeps those (pulled, not yet trained) and a
checkpoint holds them, serialized, beside the iterator; a restored feed yields them first.
So a restart costs what reading one checkpoint costs, and resumes at the same batch.
"""

import collections
import contextlib
import threading

import keras
import tensorflow as tf

from keras_transformer.data.options import without_autotune_thread


class CheckpointableFeed:
    """Batches of `dataset` for `fit`, with a position that checkpoints can hold.

    Args:
        dataset: the training batches (dense tensors), one element per `fit` step.

    Example:
        >>> feed = CheckpointableFeed(train_data)  # doctest: +SKIP
        >>> checkpointer.attach_data_iterator(feed.trackable)  # doctest: +SKIP
        >>> model.fit(feed.dataset(), callbacks=[feed.callback(), ...])  # doctest: +SKIP
    """

    def __init__(self, dataset):
        self.element_spec = dataset.element_spec
        self.iterator = iter(dataset)
        # Pulled but not yet trained on, serialized (`saving`): written with the iterator.
        self.pending = tf.Variable(
            tf.constant([], tf.string),
            shape=tf.TensorShape(None),
            trainable=False,
            name="pending_batches",
        )
        # What a checkpoint holds of the feed, under `data_iterator/`.
        self.trackable = tf.train.Checkpoint(iterator=self.iterator, pending=self.pending)
        self._lock = threading.Lock()
        self._pulled = collections.deque()  # handed to fit, not yet trained on
        self._restored = collections.deque()  # from a checkpoint, not yet handed to fit

    def dataset(self):
        """The dataset to give `fit`: the batches, in order, from the host iterator."""
        feed = tf.data.Dataset.from_generator(self._elements, output_signature=self.element_spec)
        return without_autotune_thread(feed)

    def _elements(self):
        while True:
            with self._lock:
                element = self._restored.popleft() if self._restored else next(self.iterator)
                self._pulled.append(element)
            yield element

    def restore_pending(self):
        """After a checkpoint was read into `trackable`: its pending batches come first."""
        specs = tf.nest.flatten(self.element_spec)
        values = self.pending.numpy()
        for start in range(0, len(values), len(specs)):
            leaves = [
                tf.io.parse_tensor(values[start + i], spec.dtype) for i, spec in enumerate(specs)
            ]
            self._restored.append(tf.nest.pack_sequence_as(self.element_spec, leaves))

    def trained_one(self):
        """One batch was trained on (fit consumes them in order, one per step)."""
        with self._lock:
            self._pulled.popleft()

    @contextlib.contextmanager
    def saving(self):
        """Holds the feed still while a checkpoint is written, with its pending batches."""
        with self._lock:
            leaves = [
                tf.io.serialize_tensor(leaf)
                for element in (*self._pulled, *self._restored)
                for leaf in tf.nest.flatten(element)
            ]
            self.pending.assign(tf.stack(leaves) if leaves else tf.constant([], tf.string))
            yield

    def callback(self):
        """The Keras callback that counts trained batches; it must come before the one that
        writes checkpoints."""
        return _CountTrained(self)


class _CountTrained(keras.callbacks.Callback):
    def __init__(self, feed):
        super().__init__()
        self.feed = feed

    def on_train_batch_end(self, batch, logs=None):
        self.feed.trained_one()
