"""The GNMT and power length penalties and the per-sentence output cap, checked against hand values."""

import math

import numpy as np
import pytest
from keras import ops

from keras_transformer.decoding import length_penalty, max_output_lengths


def test_length_penalty_hand_values():
    # ((5 + 10) / 6) ** 0.6 = 2.5 ** 0.6 = exp(0.6 * ln 2.5) = exp(0.549774) = 1.732862
    assert abs(length_penalty(10, 0.6) - 1.732862) < 1e-6
    assert length_penalty(1, 0.6) == 1.0  # (6 / 6) ** alpha
    assert length_penalty(37, 0.0) == 1.0  # alpha = 0: no penalty
    lengths = ops.convert_to_tensor(np.array([1, 7, 25], "int32"))
    expected = [1.0, 2.0**0.6, 5.0**0.6]  # (12/6), (30/6)
    np.testing.assert_allclose(
        ops.convert_to_numpy(length_penalty(lengths, 0.6)), expected, rtol=1e-6
    )


def test_length_penalty_grows_with_length_for_positive_alpha():
    values = [length_penalty(n, 0.6) for n in range(1, 60)]
    assert all(a < b for a, b in zip(values, values[1:]))
    assert math.isclose(length_penalty(2, 1.0), 7 / 6)


def test_max_output_lengths_is_source_length_plus_extra_capped_by_max_length():
    source_ids = ops.convert_to_tensor(np.array([[5, 6, 7, 3], [8, 3, 0, 0]], "int32"))
    caps, buffer_length = max_output_lengths(source_ids, 0, max_extra_length=50, max_length=53)
    assert ops.convert_to_numpy(caps).tolist() == [53, 52]  # 4 + 50 -> 53; 2 + 50
    assert buffer_length == 53
    caps, buffer_length = max_output_lengths(source_ids, 0, max_extra_length=3, max_length=100)
    assert ops.convert_to_numpy(caps).tolist() == [7, 5]
    assert buffer_length == 7


def test_power_length_penalty_hand_values():
    assert length_penalty(4, 0.5, "power") == 2.0  # 4 ** 0.5
    assert length_penalty(3, 1.0, "power") == 3.0
    assert length_penalty(37, 0.0, "power") == 1.0
    lengths = ops.convert_to_tensor(np.array([1, 8, 27], "int32"))
    np.testing.assert_allclose(
        ops.convert_to_numpy(length_penalty(lengths, 1 / 3, "power")), [1.0, 2.0, 3.0], rtol=1e-6
    )
    # An exported graph's per-request choice: a boolean tensor, True for "power".
    for power, expected in ((True, [1.0, 8.0, 27.0]), (False, [1.0, 13 / 6, 32 / 6])):
        found = length_penalty(lengths, 1.0, ops.convert_to_tensor(power))
        np.testing.assert_allclose(ops.convert_to_numpy(found), expected, rtol=1e-6)
    with pytest.raises(ValueError, match="gnmt.*power.*'linear'"):
        length_penalty(3, 1.0, "linear")
