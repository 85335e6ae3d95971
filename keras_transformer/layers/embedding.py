"""Token embedding shared with the pre-softmax projection (paper section 3.4)."""

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class SharedEmbedding(keras.layers.Layer):
    """Token embeddings multiplied by sqrt(d_model); `reverse=True` reuses the matrix for logits.

    The paper shares one matrix between the source embedding, the target embedding and the
    pre-softmax linear transformation, and multiplies embeddings by sqrt(d_model). The matrix
    is initialised with N(0, d_model^-0.5) so that the scaled embeddings have unit variance,
    as in tensor2tensor and fairseq.

    Args:
        vocab_size: rows of the matrix.
        d_model: columns of the matrix.
        scale: whether `call` multiplies by sqrt(d_model) (3.4).

    Example:
    >>> embedding = SharedEmbedding(vocab_size=100, d_model=32)
    >>> x = embedding(keras.ops.array([[5, 6, 0]]))          # [1, 3, 32]
    >>> embedding(x, reverse=True).shape                        # logits over the vocabulary
    (1, 3, 100)
    """

    def __init__(self, vocab_size, d_model, scale=True, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.scale = scale

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            shape=(self.vocab_size, self.d_model),
            initializer=keras.initializers.RandomNormal(stddev=self.d_model**-0.5),
            name="embeddings",
        )

    def call(self, inputs, reverse=False):
        """Embeds token ids; with `reverse=True`, the pre-softmax linear transformation of
        hidden states `[..., d_model]` to logits `[..., vocab_size]` with the same matrix."""
        if reverse:
            return ops.matmul(inputs, ops.transpose(ops.cast(self.embeddings, inputs.dtype)))
        embedded = ops.take(self.embeddings, ops.cast(inputs, "int32"), axis=0)
        if self.scale:
            embedded = embedded * ops.cast(math.sqrt(self.d_model), embedded.dtype)
        return embedded

    def compute_output_spec(self, inputs, reverse=False):
        if reverse:
            shape = tuple(inputs.shape[:-1]) + (self.vocab_size,)
        else:
            shape = tuple(inputs.shape) + (self.d_model,)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "d_model": self.d_model,
            "scale": self.scale,
        }
