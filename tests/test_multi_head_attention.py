import numpy as np
from keras import ops

from keras_transformer.layers import MultiHeadAttention
from tests import reference


def test_equals_numpy_multihead_with_independent_d_k_and_d_v():
    rng = np.random.default_rng(0)
    query = rng.normal(size=(2, 5, 16)).astype("float32")
    memory = rng.normal(size=(2, 7, 16)).astype("float32")
    mask = np.ones((2, 1, 7), bool)
    mask[1, :, 4:] = False
    layer = MultiHeadAttention(num_heads=4, key_dim=3, value_dim=5)
    out = ops.convert_to_numpy(layer(query, memory, attention_mask=mask))
    assert out.shape == (2, 5, 16)
    np.testing.assert_allclose(
        out, reference.multi_head_attention(layer, query, memory, mask), atol=1e-5
    )
    # Row (B) of Table 3 changes d_k alone: Q and K are d_model x h*d_k, V is d_model x h*d_v.
    shapes = {w.path.split("/")[-2]: tuple(w.shape) for w in layer.weights if "kernel" in w.path}
    assert shapes == {"query": (16, 12), "key": (16, 12), "value": (16, 20), "output": (20, 16)}


def test_self_attention_cache_matches_full_computation():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 6, 16)).astype("float32")
    layer = MultiHeadAttention(num_heads=2, key_dim=8, value_dim=4)
    causal = np.tril(np.ones((6, 6), bool))[None]
    full = ops.convert_to_numpy(layer(x, attention_mask=causal))
    cache = layer.init_cache(batch_size=2, max_length=9)  # longer than needed: slots stay 0
    for step in range(6):
        visible = (np.arange(9) <= step)[None, None, :]
        out, cache = layer(
            x[:, step : step + 1], attention_mask=visible, cache=cache, cache_update_index=step
        )
        np.testing.assert_allclose(ops.convert_to_numpy(out)[:, 0], full[:, step], atol=1e-5)
    keys, values = (ops.convert_to_numpy(c) for c in cache)
    assert keys.shape == (2, 2, 9, 8) and values.shape == (2, 2, 9, 4)  # heads first
    assert not keys[:, :, 6:].any()  # unwritten slots


def test_cross_attention_cache_is_computed_once_and_reused():
    rng = np.random.default_rng(2)
    query = rng.normal(size=(1, 3, 16)).astype("float32")
    memory = rng.normal(size=(1, 4, 16)).astype("float32")
    layer = MultiHeadAttention(num_heads=2, key_dim=8)
    expected = ops.convert_to_numpy(layer(query, memory))
    cache = layer.compute_cache(memory)
    out, same_cache = layer(query, attention_mask=None, cache=cache)
    np.testing.assert_allclose(ops.convert_to_numpy(out), expected, atol=1e-5)
    for returned, given in zip(same_cache, cache):
        np.testing.assert_array_equal(ops.convert_to_numpy(returned), ops.convert_to_numpy(given))


def test_get_config_round_trip():
    layer = MultiHeadAttention(num_heads=4, key_dim=3, value_dim=5, dropout=0.1)
    config = MultiHeadAttention.from_config(layer.get_config()).get_config()
    assert {k: config[k] for k in ("num_heads", "key_dim", "value_dim", "dropout")} == {
        "num_heads": 4,
        "key_dim": 3,
        "value_dim": 5,
        "dropout": 0.1,
    }
