"""The fused projection + label-smoothed loss: the same loss and gradients as a NumPy
re-computation, and the same training update as the plain path (logits, then the loss)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TransformerConfig, build_model
from keras_transformer.training import TrainingModel
from keras_transformer.training.fused_loss import chunk_tokens, fused_projection_loss

EPS = 0.1


def _numpy_loss_and_gradients(hidden, matrix, labels, eps, pad_id):
    """Sum over non-pad tokens of -sum_v q_v log softmax(h W^T)_v, and its gradients."""
    flat = hidden.reshape(-1, hidden.shape[-1]).astype(np.float64)
    w = matrix.astype(np.float64)
    flat_labels = labels.reshape(-1)
    vocab = w.shape[0]
    logits = flat @ w.T
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    target = np.full_like(logits, eps / vocab)
    target[np.arange(len(flat_labels)), flat_labels] += 1.0 - eps
    real = (flat_labels != pad_id).astype(np.float64)[:, None]
    loss = float(-(target * log_probs * real).sum())
    d_logits = (np.exp(log_probs) - target) * real
    return loss, (d_logits @ w).reshape(hidden.shape), d_logits.T @ flat


def _random_case(seed=0, shape=(3, 7), d_model=16, vocab=50, pad_id=0):
    rng = np.random.default_rng(seed)
    hidden = rng.normal(size=shape + (d_model,)).astype("float32")
    matrix = (rng.normal(size=(vocab, d_model)) * 0.5).astype("float32")
    labels = rng.integers(1, vocab, size=shape).astype("int32")
    labels[0, 4:] = pad_id  # padding rows give no loss and no gradient
    labels[2, 6:] = pad_id
    return hidden, matrix, labels


def _fused(hidden, matrix, labels, chunk, dtype="float32", jit_compile=False):
    @tf.function(jit_compile=jit_compile)
    def run(hidden, matrix):
        with tf.GradientTape() as tape:
            tape.watch([hidden, matrix])
            loss = fused_projection_loss(
                tf.cast(hidden, dtype), tf.cast(matrix, dtype), labels, EPS, pad_id=0, chunk=chunk
            )
        return (loss,) + tuple(tape.gradient(loss, [hidden, matrix]))

    return [np.asarray(x) for x in run(tf.constant(hidden), tf.constant(matrix))]


@pytest.mark.parametrize("chunk", [4, 8, 21, 64])  # uneven last chunk, exact, one chunk
def test_matches_numpy_loss_and_gradients(chunk):
    hidden, matrix, labels = _random_case()
    loss, d_hidden, d_matrix = _fused(hidden, matrix, labels, chunk)
    ref_loss, ref_hidden, ref_matrix = _numpy_loss_and_gradients(hidden, matrix, labels, EPS, 0)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    np.testing.assert_allclose(d_hidden, ref_hidden, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(d_matrix, ref_matrix, rtol=1e-4, atol=1e-5)
    assert np.all(d_hidden[0, 4:] == 0) and np.all(d_hidden[2, 6:] == 0)


def test_no_smoothing_is_the_negative_log_likelihood():
    hidden, matrix, labels = _random_case(seed=1)
    logits = hidden @ matrix.T
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    real = labels != 0
    expected = -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0][real].sum()
    loss = fused_projection_loss(tf.constant(hidden), tf.constant(matrix), labels, 0.0, 0, chunk=8)
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5)


def test_xla_compiles_and_agrees():
    hidden, matrix, labels = _random_case(seed=2)
    eager = _fused(hidden, matrix, labels, 8)
    compiled = _fused(hidden, matrix, labels, 8, jit_compile=True)
    for a, b in zip(eager, compiled):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_bfloat16_stays_close_to_float32():
    hidden, matrix, labels = _random_case(seed=3)
    ref_loss, ref_hidden, ref_matrix = _numpy_loss_and_gradients(hidden, matrix, labels, EPS, 0)
    loss, d_hidden, d_matrix = _fused(hidden, matrix, labels, 8, dtype="bfloat16")
    # bfloat16 inputs (8 bits of mantissa) into a float32 softmax: about 1% on the loss.
    np.testing.assert_allclose(loss, ref_loss, rtol=2e-2)
    scale = np.abs(ref_matrix).max()
    assert np.abs(d_matrix.astype("float32") - ref_matrix).max() < 0.05 * scale


def test_chunk_tokens_keeps_a_chunk_near_ten_megabytes():
    assert chunk_tokens(10000) == 248  # 2.5M / 10000 = 250, rounded down to a multiple of 8
    assert chunk_tokens(37000) == 64
    assert chunk_tokens(50) == 4096  # capped
    assert chunk_tokens(10**9) == 8  # at least one small chunk


def _batch(rng, vocab, batch=4, length=9):
    source = rng.integers(4, vocab, size=(batch, length)).astype("int32")
    labels = rng.integers(4, vocab, size=(batch, length)).astype("int32")
    source[1, 5:] = 0
    labels[2, 3:] = 0
    target = np.concatenate([np.full((batch, 1), 2, "int32"), labels[:, :-1]], axis=1)
    target[labels == 0] = 0
    return {"source_ids": source, "target_ids": target}, labels


@pytest.mark.parametrize("shared", ["all", "none"])
def test_training_update_equals_the_plain_path(shared):
    config = TransformerConfig(
        vocab_size=60,
        num_layers=1,
        d_model=32,
        d_ff=64,
        num_heads=4,
        dropout=0.0,
        shared_embeddings=shared,
    )
    keras.utils.set_random_seed(7)
    model = TrainingModel(build_model(config))
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=1.0))
    model.optimizer.build(model.transformer.trainable_variables)
    initial = model.transformer.get_weights()
    rng = np.random.default_rng(0)
    micro_batches = (_batch(rng, config.vocab_size), _batch(rng, config.vocab_size, 3, 6))
    after = {}
    for fused in (True, False):
        model.fused_loss = fused
        model.transformer.set_weights(initial)
        logs = model.train_step(micro_batches)
        after[fused] = model.transformer.get_weights(), float(logs["loss"])
    for a, b, _start in zip(after[True][0], after[False][0], initial):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # SGD(1) moved every weight matrix by its gradient: the comparison above is not vacuous.
    assert max(np.abs(a - b).max() for a, b in zip(after[True][0], initial)) > 1e-3
    np.testing.assert_allclose(after[True][1], after[False][1], rtol=1e-6)


def test_float16_keeps_the_plain_path():
    config = TransformerConfig(vocab_size=60, num_layers=1, d_model=32, d_ff=64, num_heads=4)
    assert TrainingModel(build_model(config)).fused_loss
    assert not TrainingModel(build_model(config, dtype="mixed_float16")).fused_loss
    assert not TrainingModel(build_model(config), fused_loss=False).fused_loss
    # Its logits come from the embedding matrix alone: an output bias trains on the plain path.
    assert not TrainingModel(build_model(config.replace(output_bias=True))).fused_loss
