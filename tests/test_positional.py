import math

import numpy as np
from keras import ops

from keras_transformer.layers import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    sinusoidal_positional_encoding,
)
from tests import reference


def test_sinusoids_equal_the_formula_of_section_3_5():
    d_model = 512
    positions = np.array([0, 1, 7, 50, 511])
    table = ops.convert_to_numpy(sinusoidal_positional_encoding(positions, d_model))
    for row, pos in enumerate(positions):
        for i in (0, 1, 2, 3, 100, 101, 510, 511):
            # float32 angles: at position ~500 one ulp of the angle is ~3e-5.
            assert abs(table[row, i] - reference.positional_encoding(pos, i, d_model)) < 1e-4
    # Hand values: PE(1, 0) = sin(1), PE(1, 1) = cos(1), PE(0, odd) = 1.
    assert abs(table[1, 0] - math.sin(1.0)) < 1e-6
    assert abs(table[1, 1] - math.cos(1.0)) < 1e-6
    assert np.allclose(table[0, 1::2], 1.0)


def test_layer_adds_encoding_from_a_start_index():
    x = np.zeros((1, 3, 8), "float32")
    out = ops.convert_to_numpy(SinusoidalPositionalEncoding()(x, start_index=5))
    expected = ops.convert_to_numpy(sinusoidal_positional_encoding(np.arange(5, 8), 8))
    np.testing.assert_allclose(out[0], expected, atol=1e-6)


def test_learned_positions_add_their_rows():
    layer = LearnedPositionalEmbedding(max_length=10)
    x = np.ones((2, 4, 6), "float32")
    out = ops.convert_to_numpy(layer(x, start_index=3))
    table = ops.convert_to_numpy(layer.position_embeddings)
    np.testing.assert_allclose(out, 1.0 + np.broadcast_to(table[3:7], (2, 4, 6)), atol=1e-6)
    assert LearnedPositionalEmbedding.from_config(layer.get_config()).max_length == 10
