"""The residual connection around each sub-layer, with its LayerNorm and dropout (3.1, 5.4)."""

import keras

from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.layer_normalization import LayerNormalization


@keras.saving.register_keras_serializable(package="keras_transformer")
class ResidualConnection(keras.layers.Layer):
    """LayerNorm(x + Dropout(Sublayer(x))), the paper's post-norm, or the pre-norm variant.

    The sub-layer itself runs outside this layer, between `normalize_input` and `call`:

        residual = ResidualConnection(dropout=0.1)
        y = residual(x, sublayer(residual.normalize_input(x)))

    With `norm_position="post"` (paper, 5.4) `normalize_input` is the identity and `call`
    returns LayerNorm(x + Dropout(y)). With `"pre"` (Wang et al., 2019; more stable for deep
    stacks) `normalize_input` is the LayerNorm and `call` returns x + Dropout(y).

    Args:
        dropout: P_drop, residual dropout on the sub-layer output.
        norm_position: "post" or "pre".
        epsilon: LayerNorm epsilon.

    Example:
    >>> residual = ResidualConnection(dropout=0.1)
    >>> x = keras.random.normal((2, 3, 8))
    >>> residual(x, 2 * residual.normalize_input(x)).shape
    (2, 3, 8)
    """

    def __init__(self, dropout=0.1, norm_position="post", epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.dropout = dropout
        self.norm_position = norm_position
        self.epsilon = epsilon
        self.layer_norm = LayerNormalization(
            epsilon=epsilon, dtype=self.dtype_policy, name="layer_norm"
        )
        self.dropout_layer = Dropout(dropout, dtype=self.dtype_policy)

    def build(self, x_shape, sublayer_output_shape=None):
        self.layer_norm.build(x_shape)

    def normalize_input(self, x):
        return self.layer_norm(x) if self.norm_position == "pre" else x

    def call(self, x, sublayer_output, training=None):
        y = x + self.dropout_layer(sublayer_output, training=training)
        return self.layer_norm(y) if self.norm_position == "post" else y

    def compute_output_shape(self, x_shape, sublayer_output_shape=None):
        return x_shape

    def get_config(self):
        return {
            **super().get_config(),
            "dropout": self.dropout,
            "norm_position": self.norm_position,
            "epsilon": self.epsilon,
        }
