import numpy as np
from keras import ops

from keras_transformer.layers import TransformerDecoder, TransformerDecoderLayer, causal_mask
from tests import reference


def test_causal_mask_lets_position_i_see_positions_up_to_i():
    np.testing.assert_array_equal(
        ops.convert_to_numpy(causal_mask(3, 3))[0], np.tril(np.ones((3, 3), bool))
    )
    # One query at step 2 of a 5-slot cache sees slots 0..2.
    np.testing.assert_array_equal(
        ops.convert_to_numpy(causal_mask(1, 5, start_index=2))[0],
        [[True, True, True, False, False]],
    )


def test_decoder_layer_is_three_post_norm_sublayers():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 4, 16)).astype("float32")
    memory = rng.normal(size=(2, 6, 16)).astype("float32")
    memory_mask = np.ones((2, 1, 6), bool)
    memory_mask[1, :, 2:] = False
    self_mask = ops.convert_to_numpy(causal_mask(4, 4))
    layer = TransformerDecoderLayer(num_heads=2, key_dim=8, value_dim=4, d_ff=32)
    out = ops.convert_to_numpy(
        layer(x, memory, self_attention_mask=self_mask, memory_mask=memory_mask)
    )

    def norm(residual, y):
        gamma, beta = (np.asarray(w) for w in residual.layer_norm.get_weights())
        return reference.layer_norm(y, gamma, beta, residual.epsilon)

    h = norm(
        layer.self_attention_residual,
        x + reference.multi_head_attention(layer.self_attention, x, x, self_mask),
    )
    h = norm(
        layer.cross_attention_residual,
        h + reference.multi_head_attention(layer.cross_attention, h, memory, memory_mask),
    )
    ffn = layer.feed_forward
    inner = np.maximum(0, reference.dense(h, ffn.inner_dense))
    expected = norm(layer.feed_forward_residual, h + reference.dense(inner, ffn.output_dense))
    np.testing.assert_allclose(out, expected, atol=1e-4)


def test_stack_with_cache_matches_the_full_pass_step_by_step():
    rng = np.random.default_rng(1)
    decoder = TransformerDecoder(
        num_layers=2, num_heads=2, key_dim=4, value_dim=6, d_ff=16, norm_position="pre"
    )
    embedded = rng.normal(size=(2, 5, 8)).astype("float32")
    memory = rng.normal(size=(2, 3, 8)).astype("float32")
    memory_mask = np.array([[[True, True, True]], [[True, False, False]]])
    full = ops.convert_to_numpy(decoder(embedded, memory, memory_mask=memory_mask))
    cache = decoder.init_cache(memory, max_length=7)
    for step in range(5):
        out, cache = decoder(
            embedded[:, step : step + 1],
            memory_mask=memory_mask,
            cache=cache,
            cache_update_index=step,
        )
        np.testing.assert_allclose(ops.convert_to_numpy(out)[:, 0], full[:, step], atol=1e-5)


def test_get_config_round_trips():
    layer = TransformerDecoder(
        num_layers=1,
        num_heads=2,
        key_dim=4,
        value_dim=4,
        d_ff=16,
        norm_position="pre",
        relu_dropout=0.1,
    )
    assert TransformerDecoder.from_config(layer.get_config()).get_config() == layer.get_config()
