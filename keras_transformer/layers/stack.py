"""What the encoder and decoder stacks share (section 3.1): positional encoding and dropout on
the embedded input (5.4), N identical layers, and with pre-norm a final LayerNorm."""

import keras

from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.layer_normalization import LayerNormalization
from keras_transformer.layers.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
)


def make_positional_layer(positional, max_length, dtype=None):
    """The positional encoding of section 3.5 ("sinusoidal") or of Table 3 row E ("learned")."""
    if positional == "learned":
        return LearnedPositionalEmbedding(max_length, dtype=dtype, name="positional")
    return SinusoidalPositionalEncoding(dtype=dtype, name="positional")


class TransformerStack(keras.layers.Layer):
    """Base of `TransformerEncoder` and `TransformerDecoder`; subclasses set `layer_class`.

    Args:
        num_layers: N.
        positional: "sinusoidal" or "learned".
        max_length: positions that a learned positional embedding covers.

    The other arguments (`num_heads`, `key_dim`, `value_dim`, `d_ff`, `dropout`,
    `attention_dropout`, `relu_dropout`, `norm_position`, `layer_norm_epsilon`, `activation`) are
    those of each layer.
    """

    layer_class = None

    def __init__(
        self,
        num_layers,
        num_heads,
        key_dim,
        value_dim,
        d_ff,
        dropout=0.1,
        attention_dropout=0.0,
        relu_dropout=0.0,
        norm_position="post",
        layer_norm_epsilon=1e-6,
        activation="relu",
        positional="sinusoidal",
        max_length=1024,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_layers = num_layers
        self.layer_args = dict(
            num_heads=num_heads,
            key_dim=key_dim,
            value_dim=value_dim,
            d_ff=d_ff,
            dropout=dropout,
            attention_dropout=attention_dropout,
            relu_dropout=relu_dropout,
            norm_position=norm_position,
            layer_norm_epsilon=layer_norm_epsilon,
            activation=activation,
        )
        self.positional = positional
        self.max_length = max_length
        policy = self.dtype_policy
        self.positional_layer = make_positional_layer(positional, max_length, policy)
        self.embedding_dropout = Dropout(dropout, dtype=policy)
        self.transformer_layers = [
            self.layer_class(**self.layer_args, dtype=policy, name=f"layer_{i}")
            for i in range(num_layers)
        ]
        self.final_norm = (
            LayerNormalization(epsilon=layer_norm_epsilon, dtype=policy, name="final_norm")
            if norm_position == "pre"
            else None
        )

    def build_stack(self, embedded_shape, *other_shapes):
        """Builds every sub-layer (subclasses' `build` calls it with their call's shapes)."""
        self.positional_layer.build(embedded_shape)
        for layer in self.transformer_layers:
            layer.build(embedded_shape, *other_shapes)
        if self.final_norm is not None:
            self.final_norm.build(embedded_shape)

    def check_layer_index(self, layer_index):
        """`layer_index` (0-based; negative counts from the end, as in Python) as an index in
        0 .. num_layers - 1.

        Raises:
            IndexError: naming the valid range, when the stack has no such layer.
        """
        if not -self.num_layers <= layer_index < self.num_layers:
            raise IndexError(
                f"layer_index {layer_index} is out of range: the {self.name} has "
                f"{self.num_layers} layers, 0 .. {self.num_layers - 1} (or "
                f"-{self.num_layers} .. -1 from the end)"
            )
        return layer_index % self.num_layers

    def finish(self, x):
        """The stack's output: with pre-norm, the final LayerNorm."""
        return x if self.final_norm is None else self.final_norm(x)

    def get_config(self):
        return {
            **super().get_config(),
            "num_layers": self.num_layers,
            **self.layer_args,
            "positional": self.positional,
            "max_length": self.max_length,
        }
