import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_transformer.layers import LayerNormalization, ResidualConnection
from tests import reference


def _layer(width, seed=0, dtype=None):
    rng = np.random.default_rng(seed)
    layer = LayerNormalization(epsilon=1e-6, dtype=dtype)
    layer.build((None, width))
    gamma, beta = (rng.normal(size=width).astype("float32") for _ in range(2))
    layer.set_weights([gamma, beta])
    return layer, gamma, beta


def _gradients(layer, x, weights):
    """d/d(x, gamma, beta) of sum(layer(x) * weights), the float32 objective."""
    x = tf.Variable(x)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.cast(layer(x, training=True), tf.float32) * weights)
    grads = tape.gradient(loss, [x, layer.gamma.value, layer.beta.value])
    return [np.asarray(tf.cast(g, tf.float32)) for g in grads]


@pytest.mark.parametrize("training", [True, False])
def test_forward_is_the_paper_layer_norm(training):
    layer, gamma, beta = _layer(8)
    x = np.random.default_rng(1).normal(size=(2, 3, 8)).astype("float32") * 3 + 1
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer(x, training=training)),
        reference.layer_norm(x, gamma, beta, 1e-6),
        atol=1e-5,
    )


def test_training_takes_the_written_gradient_and_inference_is_keras_call(monkeypatch):
    # Decoding and exports run Keras's own graph; fit's forward (training=True, also when a
    # ResidualConnection passes it on) runs the function with the written gradient.
    from keras_transformer.layers import layer_normalization

    calls = []
    written = layer_normalization._layer_norm
    monkeypatch.setattr(
        layer_normalization, "_layer_norm", lambda *args: calls.append(1) or written(*args)
    )
    residual = ResidualConnection(dropout=0.0)
    x = np.ones((2, 3, 8), "float32")
    residual(x, x, training=False)
    assert calls == []
    residual(x, x, training=True)
    assert calls == [1]


def test_gradients_match_float64_finite_differences():
    # An independent reference: central differences of the NumPy layer norm in float64.
    layer, gamma, beta = _layer(6, seed=2)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 3, 6)).astype("float32")
    weights = rng.normal(size=(2, 3, 6)).astype("float32")
    ours = _gradients(layer, x, weights)

    def objective(x_, gamma_, beta_):
        return float((reference.layer_norm(x_, gamma_, beta_, 1e-6) * weights).sum())

    args = [x.astype("float64"), gamma.astype("float64"), beta.astype("float64")]
    for index, analytic in enumerate(ours):
        numeric = np.zeros_like(args[index])
        for position in np.ndindex(*args[index].shape):
            shifted = [a.copy() for a in args]
            shifted[index][position] += 1e-6
            up = objective(*shifted)
            shifted[index][position] -= 2e-6
            numeric[position] = (up - objective(*shifted)) / 2e-6
        np.testing.assert_allclose(analytic, numeric, rtol=1e-3, atol=1e-4)


def test_same_function_and_gradients_as_keras_layer_norm():
    layer, gamma, beta = _layer(64, seed=4)
    keras_layer = keras.layers.LayerNormalization(epsilon=1e-6)
    keras_layer.build((None, 64))
    keras_layer.set_weights([gamma, beta])
    rng = np.random.default_rng(5)
    x = rng.normal(size=(4, 16, 64)).astype("float32") * 2 - 0.5
    weights = rng.normal(size=x.shape).astype("float32")
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer(x, training=True)),
        ops.convert_to_numpy(keras_layer(x)),
        atol=1e-5,
    )
    for ours, theirs in zip(_gradients(layer, x, weights), _gradients(keras_layer, x, weights)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)


def test_bfloat16_within_a_bound_of_float32():
    # Statistics and gradients are float32 inside; only the bfloat16 input, output and
    # input gradient are rounded (8 significant bits: relative 2**-8 each).
    rng = np.random.default_rng(6)
    x = rng.normal(size=(8, 32)).astype("float32")
    weights = rng.normal(size=x.shape).astype("float32")
    full, gamma, beta = _layer(32, seed=7)
    half, _, _ = _layer(32, seed=7, dtype="mixed_bfloat16")
    y32 = ops.convert_to_numpy(full(x, training=True))
    y16 = half(ops.cast(x, "bfloat16"), training=True)
    assert y16.dtype == "bfloat16"
    y16 = ops.convert_to_numpy(ops.cast(y16, "float32"))
    np.testing.assert_allclose(y16, y32, rtol=3e-2, atol=3e-2)
    for g16, g32 in zip(
        _gradients(half, tf.cast(x, tf.bfloat16), weights), _gradients(full, x, weights)
    ):
        np.testing.assert_allclose(g16, g32, rtol=5e-2, atol=5e-2 * np.abs(g32).max())


def test_weights_are_named_as_keras_layer_norm_and_the_model_uses_it():
    # Checkpoints and .keras files written with keras.layers.LayerNormalization load: the
    # variables, their names and order are Keras's.
    ours, keras_layer = LayerNormalization(name="ln"), keras.layers.LayerNormalization(name="ln")
    ours.build((None, 16))
    keras_layer.build((None, 16))
    assert [(w.path, w.shape) for w in ours.weights] == [
        (w.path, w.shape) for w in keras_layer.weights
    ]
    assert isinstance(ResidualConnection(dropout=0.1).layer_norm, LayerNormalization)


def test_other_settings_take_keras_path_and_config_round_trips():
    layer = LayerNormalization(axis=1, epsilon=1e-3, center=False)
    x = np.random.default_rng(8).normal(size=(3, 5, 4)).astype("float32")
    expected = keras.layers.LayerNormalization(axis=1, epsilon=1e-3, center=False)(x)
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer(x, training=True)), ops.convert_to_numpy(expected), atol=1e-6
    )
    clone = LayerNormalization.from_config(LayerNormalization(epsilon=1e-6).get_config())
    assert clone.epsilon == 1e-6
    assert (
        keras.saving.get_registered_object("keras_transformer>LayerNormalization")
        is LayerNormalization
    )


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_other_backends_give_keras_gradients(backend):
    from tests.test_backends import run_without_tensorflow

    script = """
        import numpy as np
        import keras
        from keras_transformer.layers import LayerNormalization

        rng = np.random.default_rng(0)
        x = rng.normal(size=(3, 5, 16)).astype("float32")
        w = rng.normal(size=x.shape).astype("float32")
        ours, theirs = LayerNormalization(epsilon=1e-6), keras.layers.LayerNormalization(
            epsilon=1e-6)
        gamma, beta = (rng.normal(size=16).astype("float32") for _ in range(2))
        for layer in (ours, theirs):
            layer.build(x.shape)
            layer.set_weights([gamma, beta])
        if keras.backend.backend() == "jax":
            import jax

            def grad(layer):
                return jax.grad(lambda v: (layer(v, training=True) * w).sum())(x)
        else:
            import torch

            def grad(layer):
                v = torch.tensor(x, requires_grad=True)
                (layer(v, training=True) * torch.tensor(w)).sum().backward()
                return v.grad
        np.testing.assert_allclose(keras.ops.convert_to_numpy(ours(x, training=True)),
                                   keras.ops.convert_to_numpy(theirs(x)), atol=1e-5)
        np.testing.assert_allclose(np.asarray(grad(ours)), np.asarray(grad(theirs)),
                                   rtol=1e-4, atol=1e-4)
        print("ok")
    """
    assert run_without_tensorflow(backend, script).strip().endswith("ok")
