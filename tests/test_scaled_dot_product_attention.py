import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import ScaledDotProductAttention
from tests import reference


def _inputs(rng, b=2, t=5, s=7, n=3, d_k=4, d_v=4):
    return (
        rng.normal(size=(b, t, n, d_k)).astype("float32"),
        rng.normal(size=(b, s, n, d_k)).astype("float32"),
        rng.normal(size=(b, s, n, d_v)).astype("float32"),
    )


@pytest.mark.parametrize("d_v", [4, 6])  # d_v != d_k takes the written-out path
def test_equals_numpy_softmax_qkt_v(d_v):
    q, k, v = _inputs(np.random.default_rng(0), d_v=d_v)
    out = ScaledDotProductAttention()(q, k, v)
    np.testing.assert_allclose(ops.convert_to_numpy(out), reference.attention(q, k, v), atol=1e-5)


@pytest.mark.parametrize("d_v", [4, 6])
def test_padding_mask_hides_keys(d_v):
    rng = np.random.default_rng(1)
    q, k, v = _inputs(rng, d_v=d_v)
    lengths = np.array([7, 4])
    mask = (np.arange(7)[None, :] < lengths[:, None])[:, None, None, :]  # [b, 1, 1, s]
    out = ops.convert_to_numpy(ScaledDotProductAttention()(q, k, v, attention_mask=mask))
    np.testing.assert_allclose(out, reference.attention(q, k, v, mask), atol=1e-5)
    # The masked keys have no influence at all: the same as attention over the prefix.
    np.testing.assert_allclose(
        out[1], reference.attention(q[1:], k[1:, :4], v[1:, :4])[0], atol=1e-5
    )


def test_causal_mask():
    rng = np.random.default_rng(2)
    q, k, v = _inputs(rng, t=6, s=6)
    mask = np.tril(np.ones((6, 6), bool))[None, None]
    out = ops.convert_to_numpy(ScaledDotProductAttention()(q, k, v, attention_mask=mask))
    np.testing.assert_allclose(out, reference.attention(q, k, v, mask), atol=1e-5)
    # Row 0 can only see key 0, so its output is exactly value 0.
    np.testing.assert_allclose(out[:, 0], v[:, 0], atol=1e-6)


def test_attention_dropout_only_in_training():
    q, k, v = _inputs(np.random.default_rng(3))
    layer = ScaledDotProductAttention(dropout=0.5)
    expected = reference.attention(q, k, v)
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer(q, k, v, training=False)), expected, atol=1e-5
    )
    trained = ops.convert_to_numpy(layer(q, k, v, training=True))
    assert not np.allclose(trained, expected, atol=1e-3)


def test_get_config_round_trip():
    layer = ScaledDotProductAttention(dropout=0.2)
    assert ScaledDotProductAttention.from_config(layer.get_config()).dropout == 0.2
