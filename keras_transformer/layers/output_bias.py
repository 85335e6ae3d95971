"""A bias on the output logits: one trainable value per vocabulary entry.

Not in the paper (its pre-softmax projection is the embedding matrix alone, 3.4); Marian and
the OPUS-MT models trained with it add one (`final_logits_bias` in Hugging Face's format).
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class OutputBias(keras.layers.Layer):
    """Adds a trainable float32 vector `bias` `[vocab_size]` (zeros at first) to logits.

    The logits are cast to float32 first, whatever the compute dtype, as `Transformer` makes
    them: the bias is float32 under every dtype policy.

    Args:
        vocab_size: the logits' last dimension.

    Example:
    >>> layer = OutputBias(vocab_size=5)
    >>> layer(keras.ops.ones((2, 3, 5))).shape
    (2, 3, 5)
    """

    def __init__(self, vocab_size, **kwargs):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        self.vocab_size = vocab_size

    def build(self, input_shape=None):
        self.bias = self.add_weight(shape=(self.vocab_size,), initializer="zeros", name="bias")

    def call(self, logits):
        return ops.cast(logits, "float32") + self.bias

    def compute_output_spec(self, logits):
        return keras.KerasTensor(tuple(logits.shape), dtype="float32")

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size}
