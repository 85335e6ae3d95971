import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_transformer.layers import Dropout, ResidualConnection


def _numpy(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "float32"])
def test_keeps_with_probability_one_minus_rate_and_scales_kept_units(policy):
    rate = 0.3
    x = np.linspace(0.5, 2.0, 200 * 256, dtype="float32").reshape(200, 256)  # no zeros
    x_in = ops.cast(x, "bfloat16" if policy == "mixed_bfloat16" else "float32")
    out = _numpy(Dropout(rate, seed=7, dtype=policy)(x_in, training=True))
    reference = _numpy(x_in) / (1.0 - rate)  # kept units, in the input's precision
    kept = out != 0
    # 51200 Bernoulli(0.7) draws: the keep fraction is within 4 standard deviations of 0.7.
    assert abs(kept.mean() - (1 - rate)) < 4 * np.sqrt(rate * (1 - rate) / kept.size)
    np.testing.assert_allclose(
        out[kept], reference[kept], rtol=1e-2 if "bfloat16" in policy else 1e-6
    )


def test_inference_and_rate_zero_are_the_identity():
    x = ops.cast(np.arange(12, dtype="float32").reshape(3, 4), "bfloat16")
    for layer, training in [
        (Dropout(0.5, dtype="mixed_bfloat16"), False),
        (Dropout(0.0, dtype="mixed_bfloat16"), True),
    ]:
        np.testing.assert_array_equal(_numpy(layer(x, training=training)), _numpy(x))


def test_float32_draws_exactly_as_keras_dropout():
    # Float32 training keeps its random stream: the same seed gives Keras's mask bit for bit.
    # (On TensorFlow our bfloat16 path would draw this mask too; the JAX and PyTorch case
    # below is the one that tells the two paths apart.)
    x = np.random.default_rng(0).normal(size=(64, 32)).astype("float32")
    ours = Dropout(0.3, seed=11)(x, training=True)
    keras_own = keras.layers.Dropout(0.3, seed=11)(x, training=True)
    np.testing.assert_array_equal(ops.convert_to_numpy(ours), ops.convert_to_numpy(keras_own))


def test_bfloat16_gradient_is_the_scaled_keep_mask():
    layer = Dropout(0.25, seed=3, dtype="mixed_bfloat16")
    x = tf.Variable(tf.ones((50, 40), tf.bfloat16))
    with tf.GradientTape() as tape:
        y = layer(x, training=True)
        loss = tf.reduce_sum(tf.cast(y, tf.float32))
    grad, y = _numpy(tape.gradient(loss, x)), _numpy(y)
    np.testing.assert_allclose(grad, np.where(y != 0, 1 / 0.75, 0.0), rtol=1e-2)
    assert 0 < np.count_nonzero(grad == 0) < grad.size


def test_masks_differ_between_calls_and_layers_use_it():
    layer = Dropout(0.5, seed=5, dtype="mixed_bfloat16")
    x = ops.ones((32, 32), "bfloat16")
    first, second = (_numpy(layer(x, training=True)) != 0 for _ in range(2))
    assert not np.array_equal(first, second)
    assert isinstance(ResidualConnection(dropout=0.1).dropout_layer, Dropout)


def test_config_round_trip():
    layer = Dropout(0.2, seed=4, name="d")
    clone = Dropout.from_config(layer.get_config())
    assert (clone.rate, clone.seed, clone.name) == (0.2, 4, "d")
    assert keras.saving.get_registered_object("keras_transformer>Dropout") is Dropout


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_other_backends_drop_bfloat16_with_the_same_rule(backend):
    # Backend-neutral `keras.ops`: the same keep fraction and scaling without TensorFlow,
    # and float32 left to Keras.
    from tests.test_backends import run_without_tensorflow

    script = """
        import numpy as np
        import keras
        from keras_transformer.layers import Dropout
        x = keras.ops.ones((200, 256), "bfloat16")
        y = keras.ops.convert_to_numpy(keras.ops.cast(
            Dropout(0.3, seed=2, dtype="mixed_bfloat16")(x, training=True), "float32"))
        kept = y != 0
        assert abs(kept.mean() - 0.7) < 4 * np.sqrt(0.21 / kept.size), kept.mean()
        np.testing.assert_allclose(y[kept], 1 / 0.7, rtol=1e-2)
        # Float32 is Keras's own dropout there too (on TensorFlow a float32 uniform path
        # happens to draw Keras's mask; on JAX Keras draws Bernoulli masks of its own).
        x32 = np.random.default_rng(0).normal(size=(64, 32)).astype("float32")
        ours = Dropout(0.3, seed=11)(x32, training=True)
        keras_own = keras.layers.Dropout(0.3, seed=11)(x32, training=True)
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(ours),
                                      keras.ops.convert_to_numpy(keras_own))
        print("OK dropout")
    """
    assert "OK dropout" in run_without_tensorflow(backend, script)
