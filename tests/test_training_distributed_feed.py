"""CheckpointableFeed: a checkpoint holds the host iterator and the batches handed on but not
trained on; a restored feed gives exactly the batches an uninterrupted one would give next."""

import numpy as np
import tensorflow as tf

from keras_transformer.training.distributed_feed import CheckpointableFeed


def _batches():
    # Elements shaped as training's: a tuple of one (inputs, labels) micro-batch, with
    # batches of different widths.
    def element(index):
        width = index % 3 + 2
        ids = tf.fill([2, width], index)
        return (({"source_ids": ids, "target_ids": ids + 100}, ids + 200),)

    return tf.data.Dataset.range(1000).map(lambda i: element(tf.cast(i, tf.int32)))


def _first(element):
    return int(element[0][1][0, 0].numpy()) - 200


def test_a_restored_feed_resumes_with_the_batches_not_yet_trained_on(tmp_path):
    feed = CheckpointableFeed(_batches())
    handed = iter(feed.dataset())
    pulled = [_first(next(handed)) for _ in range(5)]  # as a prefetching input would
    assert pulled == [0, 1, 2, 3, 4]
    for _ in range(2):  # batches 0 and 1 were trained on; 2, 3 and 4 are in flight
        feed.trained_one()
    with feed.saving():
        path = tf.train.Checkpoint(data_iterator=feed.trackable).write(str(tmp_path / "ckpt"))
    # An uninterrupted feed goes on with 5, ...; a restored one must give 2, 3, 4 first.
    restored = CheckpointableFeed(_batches())
    tf.train.Checkpoint(data_iterator=restored.trackable).read(path).assert_consumed()
    restored.restore_pending()
    resumed = iter(restored.dataset())
    elements = [next(resumed) for _ in range(5)]
    assert [_first(e) for e in elements] == [2, 3, 4, 5, 6]
    # Whole elements, widths and every leaf, not only their first values.
    reference = list(_batches().skip(2).take(5))
    for got, expected in zip(elements, reference):
        for a, b in zip(tf.nest.flatten(got), tf.nest.flatten(expected)):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_a_feed_with_nothing_in_flight_saves_an_empty_list(tmp_path):
    feed = CheckpointableFeed(_batches())
    with feed.saving():
        path = tf.train.Checkpoint(data_iterator=feed.trackable).write(str(tmp_path / "ckpt"))
    restored = CheckpointableFeed(_batches())
    tf.train.Checkpoint(data_iterator=restored.trackable).read(path).assert_consumed()
    restored.restore_pending()
    assert _first(next(iter(restored.dataset()))) == 0
