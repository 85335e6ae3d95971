import numpy as np
from keras import ops

from keras_transformer.layers import TransformerEncoder, TransformerEncoderLayer, padding_mask
from tests import reference


def _norm(residual):
    gamma, beta = (np.asarray(w) for w in residual.layer_norm.get_weights())
    return lambda x: reference.layer_norm(x, gamma, beta, residual.epsilon)


def test_encoder_layer_is_two_post_norm_sublayers():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 16)).astype("float32")
    mask = np.ones((2, 1, 5), bool)
    mask[0, :, 3:] = False
    layer = TransformerEncoderLayer(num_heads=2, key_dim=8, value_dim=8, d_ff=32)
    out = ops.convert_to_numpy(layer(x, attention_mask=mask))
    ffn = layer.feed_forward
    # LayerNorm(x + MultiHead(x, x, x)), then LayerNorm(h + FFN(h)) (3.1, 5.4; dropout off)
    h = _norm(layer.self_attention_residual)(
        x + reference.multi_head_attention(layer.self_attention, x, x, mask)
    )
    inner = np.maximum(0, reference.dense(h, ffn.inner_dense))
    expected = _norm(layer.feed_forward_residual)(h + reference.dense(inner, ffn.output_dense))
    np.testing.assert_allclose(out, expected, atol=1e-4)


def test_padding_mask_marks_real_tokens():
    mask = ops.convert_to_numpy(padding_mask(np.array([[5, 3, 0, 0], [7, 8, 9, 3]])))
    np.testing.assert_array_equal(mask, [[[True, True, False, False]], [[True] * 4]])


def test_stack_has_n_layers_and_a_final_norm_only_with_pre_norm():
    args = dict(num_layers=3, num_heads=2, key_dim=4, value_dim=4, d_ff=16)
    post = TransformerEncoder(**args)
    pre = TransformerEncoder(**args, norm_position="pre")
    x = np.random.default_rng(1).normal(size=(1, 4, 8)).astype("float32")
    assert post(x).shape == pre(x).shape == (1, 4, 8)
    assert len(post.transformer_layers) == 3 and post.final_norm is None
    assert pre.final_norm is not None
    # Dropout acts on the embedding + position sum in training only.
    dropping = TransformerEncoder(**{**args, "num_layers": 1}, dropout=0.5)
    plain = TransformerEncoder(**{**args, "num_layers": 1})  # the same stack without dropout
    dropping(x), plain(x)  # built
    for plain_weight, weight in zip(plain.trainable_weights, dropping.trainable_weights):
        plain_weight.assign(weight)
    np.testing.assert_allclose(
        ops.convert_to_numpy(dropping(x, training=False)),
        ops.convert_to_numpy(plain(x)),
        atol=1e-6,
    )
    assert not np.allclose(
        ops.convert_to_numpy(dropping(x, training=True)),
        ops.convert_to_numpy(dropping(x, training=False)),
    )


def test_get_config_round_trips():
    layer = TransformerEncoder(
        num_layers=2,
        num_heads=2,
        key_dim=4,
        value_dim=6,
        d_ff=16,
        dropout=0.2,
        positional="learned",
        max_length=9,
    )
    config = TransformerEncoder.from_config(layer.get_config()).get_config()
    assert config == layer.get_config()
