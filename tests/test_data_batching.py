"""Tests of keras_transformer.data.batching: bucket boundaries, batch sizes, token budgets."""

import collections

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from keras_transformer.data import batching  # noqa: E402
from keras_transformer.errors import UserInputError  # noqa: E402


def test_boundaries_follow_tensor2tensor_growth():
    # Hand-computed: +1 while int(x * 1.1) <= x, then x -> int(x * 1.1); last = max_length + 1.
    expected = list(range(8, 21)) + [22, 24, 26, 28, 30, 31]
    assert batching.bucket_boundaries(30) == expected
    assert batching.bucket_boundaries(16) == list(range(8, 18))
    assert batching.bucket_boundaries(5) == [6]  # every length shares one bucket
    assert batching.bucket_boundaries(100, min_length=4, growth=2.0) == [4, 8, 16, 32, 64, 101]
    with pytest.raises(UserInputError, match="growth"):
        batching.bucket_boundaries(30, growth=1.0)


def test_batch_sizes_respect_budget_and_replicas():
    # Longest lengths 7, 11, 16 at a budget of 64: 9, 5 and 4 pairs per replica.
    assert batching.bucket_batch_sizes([8, 12, 17], 64) == [9, 5, 4, 1]
    assert batching.bucket_batch_sizes([8, 12, 17], 64, num_replicas=4) == [36, 20, 16, 4]
    boundaries = batching.bucket_boundaries(256)
    for size, boundary in zip(batching.bucket_batch_sizes(boundaries, 4096, 2), boundaries):
        assert size % 2 == 0 and size >= 2
        assert (size // 2) * (boundary - 1) <= 4096


def test_budget_below_max_length_is_a_user_error():
    with pytest.raises(UserInputError, match="cannot hold one pair of the maximum length 256"):
        batching.bucket_batch_sizes(batching.bucket_boundaries(256), 200)


def _random_pairs(count, max_length, seed):
    rng = np.random.default_rng(seed)
    elements = []
    for index in range(count):
        source = rng.integers(4, 100, size=rng.integers(1, max_length + 1)).astype(np.int32)
        labels = rng.integers(4, 100, size=rng.integers(1, max_length + 1)).astype(np.int32)
        # Tag each pair with its index in the first source token to find it after batching.
        source[0] = 1000 + index
        elements.append({"source_ids": source, "target_ids": labels, "labels": labels})
    return elements


def _as_dataset(elements):
    def generator():
        yield from elements

    signature = {name: tf.TensorSpec([None], tf.int32) for name in batching.SEQUENCE_FEATURES}
    return tf.data.Dataset.from_generator(generator, output_signature=signature)


@pytest.mark.parametrize("num_replicas", [1, 2, 3])
def test_token_budget_batches_hold_every_pair_once_within_budget(num_replicas):
    max_length, budget = 40, 160
    elements = _random_pairs(600, max_length, seed=num_replicas)
    batches = list(
        batching.token_budget_batches(
            _as_dataset(elements),
            token_budget=budget,
            max_length=max_length,
            num_replicas=num_replicas,
        ).as_numpy_iterator()
    )
    boundaries = batching.bucket_boundaries(max_length)
    sizes = batching.bucket_batch_sizes(boundaries, budget, num_replicas)
    seen = collections.Counter()
    partial_seen = False
    for batch in batches:
        rows = batch["source_ids"].shape[0]
        per_replica_rows = -(-rows // num_replicas)
        for name in ("source_ids", "labels"):
            assert per_replica_rows * batch[name].shape[1] <= budget
        longest = max(batch["source_ids"].shape[1], batch["labels"].shape[1])
        bucket = int(np.searchsorted(boundaries, longest, side="right"))
        if rows < sizes[bucket]:
            partial_seen = True
        else:
            # Full batches (a multiple of the replica count) all come before the partial
            # ones that end a finite input.
            assert rows == sizes[bucket] and rows % num_replicas == 0
            assert not partial_seen
        for row in range(rows):
            source = batch["source_ids"][row]
            index = int(source[0]) - 1000
            length = len(elements[index]["source_ids"])
            np.testing.assert_array_equal(source[:length], elements[index]["source_ids"])
            assert not source[length:].any()  # padded with 0
            seen[index] += 1
    assert seen == collections.Counter(range(600))
    # The first batch always splits evenly across replicas.
    assert batches[0]["source_ids"].shape[0] % num_replicas == 0


def test_pad_to_bucket_boundary_gives_static_bucket_shapes():
    elements = _random_pairs(300, 30, seed=7)
    boundaries = batching.bucket_boundaries(30)
    batches = batching.token_budget_batches(
        _as_dataset(elements), token_budget=120, max_length=30, pad_to_bucket_boundary=True
    )
    for batch in batches.as_numpy_iterator():
        length = batch["source_ids"].shape[1]
        assert length + 1 in boundaries
        assert batch["labels"].shape[1] == length


def test_sequence_length_is_the_longer_side():
    element = {
        "source_ids": tf.zeros([5], tf.int32),
        "target_ids": tf.zeros([9], tf.int32),
        "labels": tf.zeros([9], tf.int32),
    }
    assert int(batching.sequence_length(element)) == 9
