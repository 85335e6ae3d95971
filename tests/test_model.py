import keras
import numpy as np
import pytest
from keras import ops

import keras_transformer as kt
from keras_transformer._keras_internals import flatten_layers
from tests import reference

TINY = kt.TransformerConfig(
    vocab_size=40, num_layers=2, d_model=32, d_ff=64, num_heads=4, dropout=0.1, max_length=64
)


def _logits(model, source, target):
    return ops.convert_to_numpy(model({"source_ids": source, "target_ids": target}, training=False))


def _random_ids(rng, shape, low=4, high=40):
    return rng.integers(low, high, shape).astype("int32")


def test_output_is_float32_logits_over_the_vocabulary():
    model = kt.build_model(TINY)
    out = model({"source_ids": np.ones((3, 7), "int32"), "target_ids": np.ones((3, 5), "int32")})
    assert tuple(out.shape) == (3, 5, 40) and "float32" in str(out.dtype)
    assert [i.name for i in model.inputs] == ["source_ids", "target_ids"]


def test_causality_later_target_tokens_do_not_change_earlier_logits():
    rng = np.random.default_rng(0)
    model = kt.build_model(TINY)
    source, target = _random_ids(rng, (2, 6)), _random_ids(rng, (2, 8))
    before = _logits(model, source, target)
    for t in (0, 3, 6):
        changed = target.copy()
        changed[:, t + 1 :] = _random_ids(rng, changed[:, t + 1 :].shape)
        after = _logits(model, source, changed)
        np.testing.assert_allclose(after[:, : t + 1], before[:, : t + 1], atol=1e-5)
        assert not np.allclose(after[:, t + 1 :], before[:, t + 1 :], atol=1e-4)


@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_appending_source_padding_changes_nothing(norm_position):
    rng = np.random.default_rng(1)
    model = kt.build_model(TINY.replace(norm_position=norm_position))
    source, target = _random_ids(rng, (2, 6)), _random_ids(rng, (2, 5))
    padded = np.concatenate([source, np.zeros((2, 9), "int32")], axis=1)
    np.testing.assert_allclose(
        _logits(model, padded, target), _logits(model, source, target), atol=1e-5
    )
    # Padding inside a batch: the shorter sentence gets the result it gets alone.
    batch = np.stack([np.r_[source[0], 0, 0, 0], np.r_[source[1], 9, 9, 9]])
    alone = _logits(model, source[:1], target[:1])
    np.testing.assert_allclose(_logits(model, batch, target)[:1], alone, atol=1e-5)


def test_one_embedding_matrix_is_shared_by_source_target_and_softmax():
    model = kt.build_model(TINY)
    assert model.source_embedding is model.target_embedding is model.output_projection
    untied = kt.build_model(TINY.replace(shared_embeddings="none"))
    matrices = {
        id(untied.source_embedding),
        id(untied.target_embedding),
        id(untied.output_projection),
    }
    assert len(matrices) == 3


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"shared_embeddings": "target"},
        {"shared_embeddings": "none"},
        {"positional": "learned"},
        {"norm_position": "pre"},
        {"key_dim": 5, "value_dim": 3, "num_heads": 2},
        {"activation": "gelu"},
        {"output_bias": True},
    ],
)
def test_parameter_count_formula_matches_the_built_model(changes):
    config = TINY.replace(**changes)
    assert kt.build_model(config).count_params() == config.parameter_count()


def test_base_and_big_parameter_counts_equal_a_direct_count():
    for preset, n, d, d_ff, h, expected_millions in (
        ("base", 6, 512, 2048, 8, 63.1),
        ("big", 6, 1024, 4096, 16, 214.2),
    ):
        config = kt.TransformerConfig.from_preset(preset, vocab_size=37000)
        direct = reference.transformer_parameter_count(37000, n, d, d_ff, h, 64, 64)
        assert kt.build_model(config).count_params() == direct
        assert round(direct / 1e6, 1) == expected_millions


def test_tiny_model_overfits_a_fixed_batch_to_full_token_accuracy():
    rng = np.random.default_rng(2)
    config = TINY.replace(num_layers=1, dropout=0.0, vocab_size=24)
    source = _random_ids(rng, (8, 6), high=24)
    labels = np.concatenate([source[:, ::-1], np.full((8, 1), config.eos_id)], 1)  # reverse
    target = np.concatenate([np.full((8, 1), config.bos_id), labels[:, :-1]], 1)
    labels[0, -3:] = 0  # some padding, which the loss and accuracy must ignore
    target[0, -2:] = 0
    model = kt.build_model(config)
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=kt.LabelSmoothedCrossEntropy(config.label_smoothing),
        metrics=[kt.MaskedTokenAccuracy()],
    )
    inputs = {"source_ids": source, "target_ids": target}
    history = model.fit(inputs, labels, batch_size=8, epochs=150, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0] / 2
    predictions = _logits(model, source, target).argmax(-1)
    real = labels != 0
    assert (predictions[real] == labels[real]).all()
    assert history.history["token_accuracy"][-1] == 1.0


def test_keras_file_round_trip_gives_identical_logits(tmp_path):
    rng = np.random.default_rng(3)
    config = TINY.replace(
        positional="learned",
        shared_embeddings="target",
        key_dim=6,
        activation="swish",
        output_bias=True,
    )
    model = kt.build_model(config)
    model.output_bias.assign(rng.normal(size=config.vocab_size))
    source, target = _random_ids(rng, (2, 5)), _random_ids(rng, (2, 4))
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, kt.Transformer) and loaded.config == config
    feed_forwards = [layer.feed_forward for layer in loaded.decoder.transformer_layers]
    feed_forwards += [layer.feed_forward for layer in loaded.encoder.transformer_layers]
    assert {layer.activation for layer in feed_forwards} == {"swish"}
    np.testing.assert_array_equal(
        ops.convert_to_numpy(loaded.output_bias), ops.convert_to_numpy(model.output_bias)
    )
    np.testing.assert_array_equal(_logits(loaded, source, target), _logits(model, source, target))


def test_mixed_precision_policy_keeps_float32_logits_and_survives_saving(tmp_path):
    model = kt.build_model(TINY, dtype="mixed_bfloat16")
    out = model({"source_ids": np.ones((1, 3), "int32"), "target_ids": np.ones((1, 2), "int32")})
    assert "float32" in str(out.dtype)
    assert (
        model.encoder.transformer_layers[0].self_attention.query_dense.compute_dtype == "bfloat16"
    )
    model.save(tmp_path / "mixed.keras")
    loaded = keras.saving.load_model(tmp_path / "mixed.keras")
    assert loaded.decoder.transformer_layers[0].feed_forward.compute_dtype == "bfloat16"
    assert loaded.decoder.transformer_layers[0].feed_forward.variable_dtype == "float32"


def test_the_activation_reaches_every_feed_forward_and_changes_the_logits():
    rng = np.random.default_rng(4)
    source, target = _random_ids(rng, (2, 5)), _random_ids(rng, (2, 4))
    relu = kt.build_model(TINY)
    gelu = kt.build_model(TINY.replace(activation="gelu"))
    gelu.set_weights(relu.get_weights())
    layers = [*gelu.encoder.transformer_layers, *gelu.decoder.transformer_layers]
    assert {layer.feed_forward.inner_dense.activation.__name__ for layer in layers} == {"gelu"}
    assert not np.allclose(_logits(gelu, source, target), _logits(relu, source, target))


def test_output_bias_is_added_to_the_logits_of_the_graph_and_of_decode_step():
    rng = np.random.default_rng(5)
    model = kt.build_model(TINY.replace(output_bias=True))
    assert kt.build_model(TINY).output_bias is None
    assert "output_bias" in model.output_bias.path and model.output_bias.dtype == "float32"
    source, target = _random_ids(rng, (2, 5)), _random_ids(rng, (2, 4))
    without_bias = _logits(model, source, target)
    bias = rng.normal(size=TINY.vocab_size).astype("float32")
    model.output_bias.assign(bias)
    np.testing.assert_allclose(_logits(model, source, target), without_bias + bias, atol=1e-5)
    # The incremental path (with and without the precomputed kernel) adds the same bias.
    memory, memory_mask = model.encode(source)
    full = ops.convert_to_numpy(model.decode(target[:, :1], memory, memory_mask))[:, 0]
    for kernel in (None, model.output_kernel()):
        cache = model.init_cache(memory, 4)
        step, _ = model.decode_step(target[:, :1], memory_mask, cache, 0, kernel)
        np.testing.assert_allclose(ops.convert_to_numpy(step), full, atol=1e-5)
    np.testing.assert_allclose(full, without_bias[:, 0] + bias, atol=1e-5)


def test_every_layer_is_built_after_build_model():
    # An unbuilt layer (even a weightless one) makes Keras re-trace the model in fit.
    model = kt.build_model(TINY)
    assert all(layer.built for layer in flatten_layers(model))


def test_cross_attention_weights_are_distributions_over_real_source_tokens():
    rng = np.random.default_rng(4)
    model = kt.build_model(TINY)
    source = np.concatenate([_random_ids(rng, (2, 5)), np.zeros((2, 2), "int32")], 1)
    source[1, 3:] = 0
    target = _random_ids(rng, (2, 4))
    weights = ops.convert_to_numpy(model.cross_attention_weights(source, target))
    assert weights.shape == (2, TINY.num_heads, 4, 7)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert np.abs(weights[0, :, :, 5:]).max() < 1e-6 and np.abs(weights[1, :, :, 3:]).max() < 1e-6
    # The weights are those the layer uses: recomputed in NumPy from its own projections.
    layer = model.decoder.transformer_layers[-1]
    memory, mask = (ops.convert_to_numpy(t) for t in model.encode(source))
    x = ops.convert_to_numpy(model.decoder.positional_layer(model.target_embedding(target)))
    causal = np.tril(np.ones((4, 4), bool))[None]
    x = ops.convert_to_numpy(
        model.decoder.transformer_layers[0](x, memory, self_attention_mask=causal, memory_mask=mask)
    )
    residual = layer.self_attention_residual
    h = ops.convert_to_numpy(residual(x, layer.self_attention(x, attention_mask=causal)))
    attention = layer.cross_attention
    q = reference.dense(h, attention.query_dense).reshape(2, 4, 4, attention.key_dim)
    k = reference.dense(memory, attention.key_dense).reshape(2, 7, 4, attention.key_dim)
    logits = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(attention.key_dim)
    expected = reference.softmax(np.where(mask[:, None], logits, -1e30))
    np.testing.assert_allclose(weights, expected, atol=1e-5)


def _numpy_self_attention(attention, x, mask):
    """softmax(Q K^T / sqrt(d_k)) per head in NumPy, with the layer's own projections; `mask`
    `[batch or 1, query, key]`, True where allowed."""
    b, t, _ = x.shape
    q = reference.dense(x, attention.query_dense).reshape(b, t, attention.num_heads, -1)
    k = reference.dense(x, attention.key_dense).reshape(b, t, attention.num_heads, -1)
    logits = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(attention.key_dim)
    return reference.softmax(np.where(mask[:, None], logits, -1e30))


def _numpy_embedded(model, ids):
    """Embedding x sqrt(d_model) + sinusoidal positions (3.4, 3.5), in NumPy."""
    d = model.config.d_model
    matrix = ops.convert_to_numpy(model.source_embedding.embeddings)
    positions = np.array(
        [[reference.positional_encoding(p, i, d) for i in range(d)] for p in range(ids.shape[1])]
    )
    return matrix[ids] * np.sqrt(d) + positions


@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_encoder_self_attention_weights_match_numpy_with_padding(norm_position):
    rng = np.random.default_rng(5)
    model = kt.build_model(TINY.replace(norm_position=norm_position))
    source = _random_ids(rng, (2, 6))
    source[1, 4:] = 0
    mask = source[:, None, :] != 0
    x = _numpy_embedded(model, source)
    for layer_index, layer in enumerate(model.encoder.transformer_layers):
        weights = ops.convert_to_numpy(model.attention_weights(source, layer_index=layer_index))
        assert weights.shape == (2, TINY.num_heads, 6, 6)
        residual = layer.self_attention_residual
        gamma, beta = (np.asarray(w) for w in residual.layer_norm.get_weights())
        # Pre-norm attends over LayerNorm(x); post-norm over x itself (3.1).
        h = reference.layer_norm(x, gamma, beta, residual.epsilon) if norm_position == "pre" else x
        np.testing.assert_allclose(
            weights, _numpy_self_attention(layer.self_attention, h, mask), atol=1e-5
        )
        assert np.abs(weights[1, :, :, 4:]).max() < 1e-6  # no query looks at padding
        x = ops.convert_to_numpy(layer(x, attention_mask=mask))
    # -1 is the last layer; 1-based "layer 2 of 2" of a user is layer_index 1.
    np.testing.assert_array_equal(ops.convert_to_numpy(model.attention_weights(source)), weights)


def test_decoder_self_attention_weights_are_causal_and_match_numpy():
    rng = np.random.default_rng(6)
    model = kt.build_model(TINY)
    source, target = _random_ids(rng, (2, 5)), _random_ids(rng, (2, 4))
    memory, memory_mask = (ops.convert_to_numpy(t) for t in model.encode(source))
    causal = np.tril(np.ones((4, 4), bool))[None]
    x = _numpy_embedded(model, target)  # one matrix for source and target (3.4)
    for layer_index, layer in enumerate(model.decoder.transformer_layers):
        weights = ops.convert_to_numpy(
            model.attention_weights(
                source, target, stack="decoder", kind="self", layer_index=layer_index
            )
        )
        assert weights.shape == (2, TINY.num_heads, 4, 4)
        np.testing.assert_allclose(
            weights, _numpy_self_attention(layer.self_attention, x, causal), atol=1e-5
        )
        assert (
            np.abs(weights[..., np.triu_indices(4, 1)[0], np.triu_indices(4, 1)[1]]).max() < 1e-6
        )  # no position looks ahead (3.2.3)
        x = ops.convert_to_numpy(
            layer(x, memory, self_attention_mask=causal, memory_mask=memory_mask)
        )
    np.testing.assert_array_equal(
        ops.convert_to_numpy(model.attention_weights(source, target, "decoder", "cross")),
        ops.convert_to_numpy(model.cross_attention_weights(source, target)),
    )


def test_attention_weights_reject_what_does_not_exist():
    model = kt.build_model(TINY)
    source = np.ones((1, 3), "int32")
    with pytest.raises(IndexError, match=r"encoder has 2 layers, 0 \.\. 1"):
        model.attention_weights(source, layer_index=2)
    with pytest.raises(IndexError, match="decoder has 2 layers"):
        model.attention_weights(source, source, stack="decoder", layer_index=-3)
    with pytest.raises(ValueError, match="encoder has no cross-attention"):
        model.attention_weights(source, kind="cross")
    with pytest.raises(ValueError, match="need target_ids"):
        model.attention_weights(source, stack="decoder")
    with pytest.raises(ValueError, match="stack must be"):
        model.attention_weights(source, stack="both")
