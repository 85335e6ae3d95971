import keras
import numpy as np
from keras import ops

from keras_transformer.layers import OutputBias


def test_adds_one_float32_value_per_vocabulary_entry_to_every_position():
    layer = OutputBias(vocab_size=5)
    logits = np.random.default_rng(0).normal(size=(2, 3, 5)).astype("float32")
    np.testing.assert_array_equal(ops.convert_to_numpy(layer(logits)), logits)  # zeros at first
    bias = np.array([0.5, -1.0, 2.0, 0.0, 3.0], "float32")
    layer.bias.assign(bias)
    np.testing.assert_allclose(ops.convert_to_numpy(layer(logits)), logits + bias, atol=1e-6)
    bf16 = layer(ops.cast(logits, "bfloat16"))
    assert "float32" in str(bf16.dtype) and layer.bias.dtype == "float32"
    assert [w.name for w in layer.trainable_weights] == ["bias"]


def test_get_config_round_trips_under_a_mixed_policy():
    layer = OutputBias(vocab_size=7, dtype="mixed_bfloat16", name="output_bias")
    again = OutputBias.from_config(layer.get_config())
    assert again.vocab_size == 7 and again.dtype_policy.name == "float32"
    assert keras.saving.get_registered_name(OutputBias) == "keras_transformer>OutputBias"
