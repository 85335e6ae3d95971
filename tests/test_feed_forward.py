import numpy as np
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
