import math

import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import PositionwiseFeedForward
from tests import reference


def test_equals_max_0_xw1_b1_w2_b2_at_each_position():
    x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
    layer = PositionwiseFeedForward(d_ff=32)
    out = ops.convert_to_numpy(layer(x))
    hidden = np.maximum(0.0, reference.dense(x, layer.inner_dense))
    np.testing.assert_allclose(out, reference.dense(hidden, layer.output_dense), atol=1e-5)
    # Position-wise: one position alone gives the same result.
    np.testing.assert_allclose(ops.convert_to_numpy(layer(x[:, 1:2]))[:, 0], out[:, 1], atol=1e-5)
    assert PositionwiseFeedForward.from_config(layer.get_config()).d_ff == 32


# The activations of `TransformerConfig.activation`, written out in NumPy: swish (SiLU) is
# x * sigmoid(x); gelu is the exact x * Phi(x), Phi the standard normal CDF (erf form).
ACTIVATIONS = {
    "relu": lambda z: np.maximum(0.0, z),
    "swish": lambda z: z / (1.0 + np.exp(-z)),
    "gelu": lambda z: 0.5 * z * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0))),
}


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_each_activation_equals_its_numpy_formula(activation):
    x = 2.0 * np.random.default_rng(1).normal(size=(2, 3, 8)).astype("float32")
    layer = PositionwiseFeedForward(d_ff=32, activation=activation)
    out = ops.convert_to_numpy(layer(x))
    hidden = ACTIVATIONS[activation](reference.dense(x, layer.inner_dense))
    np.testing.assert_allclose(out, reference.dense(hidden, layer.output_dense), atol=1e-5)
    assert PositionwiseFeedForward.from_config(layer.get_config()).activation == activation
