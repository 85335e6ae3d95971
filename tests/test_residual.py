import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import ResidualConnection
from tests import reference


@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_residual_formulas(norm_position):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 8)).astype("float32")
    layer = ResidualConnection(dropout=0.1, norm_position=norm_position, epsilon=1e-6)
    layer.build(x.shape)
    gamma, beta = (rng.normal(size=8).astype("float32") for _ in range(2))
    layer.layer_norm.set_weights([gamma, beta])

    def sublayer(h):
        return 3.0 * h + 1.0

    out = ops.convert_to_numpy(layer(x, sublayer(layer.normalize_input(x)), training=False))
    if norm_position == "post":  # LayerNorm(x + Dropout(Sublayer(x))), section 5.4
        expected = reference.layer_norm(x + sublayer(x), gamma, beta, 1e-6)
    else:  # x + Dropout(Sublayer(LayerNorm(x)))
        expected = x + sublayer(reference.layer_norm(x, gamma, beta, 1e-6))
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_dropout_applies_to_the_sublayer_output_in_training_only():
    x = np.ones((1, 2, 8), "float32")
    layer = ResidualConnection(dropout=0.5, norm_position="pre")
    y = np.full((1, 2, 8), 10.0, "float32")
    out = ops.convert_to_numpy(layer(x, y, training=True))
    # Dropped entries keep x alone; kept ones get y / (1 - rate).
    assert set(np.unique(out)) <= {1.0, 21.0} and len(np.unique(out)) == 2
    np.testing.assert_allclose(ops.convert_to_numpy(layer(x, y, training=False)), x + y)
