"""Position-wise feed-forward network (paper section 3.3, equation 2)."""

import keras

from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.shapes import dense_on_rows


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionwiseFeedForward(keras.layers.Layer):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied to each position alike (with another
    `activation`, act(x W_1 + b_1) W_2 + b_2).

    Args:
        d_ff: inner width (2048 in the base model).
        output_dim: output width; defaults to the input's last dimension (d_model).
        relu_dropout: dropout after the ReLU (not in the paper: default 0).
        activation: the inner activation, a Keras name: "relu" as the paper, "swish"
            (x * sigmoid(x)) or "gelu" (exact, erf form) as `TransformerConfig.activation`.

    Example:
    >>> ffn = PositionwiseFeedForward(d_ff=2048)
    >>> ffn(keras.random.normal((2, 10, 512))).shape
    (2, 10, 512)
    """

    def __init__(
        self,
        d_ff,
        output_dim=None,
        relu_dropout=0.0,
        activation="relu",
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.d_ff = d_ff
        self.output_dim = output_dim
        self.relu_dropout = relu_dropout
        self.activation = activation
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.inner_dense = keras.layers.Dense(
            d_ff,
            activation=activation,
            kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy,
            name="inner",
        )
        self.relu_dropout_layer = Dropout(relu_dropout, dtype=self.dtype_policy)

    def build(self, input_shape):
        self.inner_dense.build(input_shape)
        self.output_dense = keras.layers.Dense(
            self.output_dim or input_shape[-1],
            kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy,
            name="output",
        )
        self.output_dense.build(tuple(input_shape[:-1]) + (self.d_ff,))

    def call(self, x, training=None):
        hidden = self.relu_dropout_layer(dense_on_rows(self.inner_dense, x), training=training)
        return dense_on_rows(self.output_dense, hidden)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.output_dim or input_shape[-1],)

    def get_config(self):
        return {
            **super().get_config(),
            "d_ff": self.d_ff,
            "output_dim": self.output_dim,
            "relu_dropout": self.relu_dropout,
            "activation": self.activation,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }
