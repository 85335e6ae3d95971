"""The chunked top-k against `keras.ops.top_k` over the whole row and against NumPy."""

import numpy as np
import pytest
from keras import ops

from keras_transformer.decoding.top_k import MIN_CHUNKED_LENGTH, top_k


def numpy_top_k(values, k):
    """The k largest of each row, ties to the lower index (a stable sort on -value)."""
    order = np.argsort(-values, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(values, order, axis=1), order


@pytest.mark.parametrize(
    "kind, length, k",
    [
        ("ties", 40000, 8),  # a divisor near sqrt(length): no padding
        ("ties", 10007, 8),  # prime: padded to whole chunks
        ("normal", 12345, 3),
        ("mostly_forbidden", 20000, 16),  # the best few, then -1e9 everywhere (NEG_INF)
        ("normal", 100, 8),  # short: ops.top_k itself
    ],
)
def test_top_k_equals_a_top_k_over_the_whole_row(kind, length, k):
    rng = np.random.default_rng(length + k)
    rows = 5
    if kind == "ties":
        values = rng.integers(0, 4, size=(rows, length)).astype("float32")
    elif kind == "normal":
        values = rng.normal(size=(rows, length)).astype("float32")
    else:
        values = np.full((rows, length), -1e9, "float32")
        values[:, rng.choice(length, size=k // 2, replace=False)] = rng.normal(size=k // 2)
    top_values, indices = (ops.convert_to_numpy(x) for x in top_k(ops.convert_to_tensor(values), k))
    expected_values, expected_indices = numpy_top_k(values, k)
    np.testing.assert_array_equal(top_values, expected_values)
    np.testing.assert_array_equal(indices, expected_indices)
    if length >= MIN_CHUNKED_LENGTH:  # the chunked path, equal to the library's too
        library_values, library_indices = ops.top_k(values, k)
        np.testing.assert_array_equal(indices, ops.convert_to_numpy(library_indices))
