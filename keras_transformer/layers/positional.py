"""Positional encodings: the sinusoids of section 3.5 and learned embeddings (Table 3 row E)."""

import keras
from keras import ops

from keras_transformer.layers.shapes import dim


def sinusoidal_positional_encoding(positions, d_model, dtype="float32"):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).

    Sines at even and cosines at odd dimensions, interleaved exactly as equation 3.5 writes
    them.

    Args:
        positions: integer tensor of positions, any shape.
        d_model: encoding width (even).

    Returns:
        `positions.shape + (d_model,)`.
    """
    positions = ops.cast(positions, "float32")[..., None]
    pair_index = ops.arange(0, d_model, 2, dtype="float32")  # 2i
    angles = positions / ops.power(10000.0, pair_index / d_model)
    encoding = ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1)  # [..., d/2, 2]
    return ops.cast(ops.reshape(encoding, ops.shape(angles)[:-1] + (d_model,)), dtype)


@keras.saving.register_keras_serializable(package="keras_transformer")
class SinusoidalPositionalEncoding(keras.layers.Layer):
    """Adds the fixed sinusoidal encoding of section 3.5 to its input.

    Call args:
        x: `[batch, length, d_model]` embeddings.
        start_index: position of `x[:, 0]` (incremental decoding passes the step).

    Example:
    >>> SinusoidalPositionalEncoding()(keras.ops.zeros((1, 4, 8))).shape
    (1, 4, 8)
    """

    def call(self, x, start_index=0):
        positions = ops.arange(dim(x, 1)) + start_index
        return x + sinusoidal_positional_encoding(positions, x.shape[-1], x.dtype)[None]

    def compute_output_shape(self, input_shape):
        return input_shape


@keras.saving.register_keras_serializable(package="keras_transformer")
class LearnedPositionalEmbedding(keras.layers.Layer):
    """Adds a learned embedding per position (Table 3 row E).

    Args:
        max_length: number of positions that have an embedding.

    Example:
    >>> LearnedPositionalEmbedding(max_length=16)(keras.ops.zeros((1, 4, 8))).shape
    (1, 4, 8)
    """

    def __init__(self, max_length, **kwargs):
        super().__init__(**kwargs)
        self.max_length = max_length

    def build(self, input_shape):
        self.position_embeddings = self.add_weight(
            shape=(self.max_length, input_shape[-1]),
            initializer=keras.initializers.RandomNormal(stddev=input_shape[-1] ** -0.5),
            name="position_embeddings",
        )

    def call(self, x, start_index=0):
        positions = ops.arange(dim(x, 1)) + start_index
        return x + ops.cast(ops.take(self.position_embeddings, positions, axis=0), x.dtype)[None]

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "max_length": self.max_length}
