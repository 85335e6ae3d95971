"""The encoder: a layer of self-attention and feed-forward, and the stack of N (section 3.1)."""

import keras
from keras import ops

from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.multi_head_attention import MultiHeadAttention
from keras_transformer.layers.residual import ResidualConnection
from keras_transformer.layers.stack import TransformerStack


def padding_mask(token_ids, pad_id=0):
    """`[batch, 1, length]` boolean, True at real tokens: the keys attention may look at."""
    return ops.expand_dims(ops.not_equal(token_ids, pad_id), 1)


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerEncoderLayer(keras.layers.Layer):
    """One encoder layer: multi-head self-attention, then a position-wise feed-forward network,
    each inside a residual connection with LayerNorm and dropout.

    Args:
        num_heads, key_dim, value_dim: h, d_k, d_v of the self-attention.
        d_ff: inner width of the feed-forward network.
        dropout: P_drop, residual dropout.
        attention_dropout, relu_dropout: optional extra dropouts (default 0, as the paper).
        norm_position: "post" (paper) or "pre".
        layer_norm_epsilon: LayerNorm epsilon.
        activation: the feed-forward activation: "relu" (paper), "swish" or "gelu".

    Call args:
        x: `[batch, length, d_model]`.
        attention_mask: `[batch, 1, length]` boolean, True at real tokens.

    Example:
    >>> layer = TransformerEncoderLayer(num_heads=4, key_dim=8, value_dim=8, d_ff=64)
    >>> layer(keras.random.normal((2, 5, 32))).shape
    (2, 5, 32)
    """

    def __init__(
        self,
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
        **kwargs,
    ):
        super().__init__(**kwargs)
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
        policy = self.dtype_policy
        self.self_attention = MultiHeadAttention(
            num_heads,
            key_dim,
            value_dim,
            dropout=attention_dropout,
            dtype=policy,
            name="self_attention",
        )
        self.self_attention_residual = ResidualConnection(
            dropout, norm_position, layer_norm_epsilon, dtype=policy, name="self_attention_residual"
        )
        self.feed_forward = PositionwiseFeedForward(
            d_ff,
            relu_dropout=relu_dropout,
            activation=activation,
            dtype=policy,
            name="feed_forward",
        )
        self.feed_forward_residual = ResidualConnection(
            dropout, norm_position, layer_norm_epsilon, dtype=policy, name="feed_forward_residual"
        )

    def build(self, x_shape):
        for layer in (self.self_attention, self.feed_forward):
            layer.build(x_shape)
        for layer in (self.self_attention_residual, self.feed_forward_residual):
            layer.build(x_shape)

    def call(self, x, attention_mask=None, training=None):
        residual = self.self_attention_residual
        h = residual.normalize_input(x)
        x = residual(
            x,
            self.self_attention(h, attention_mask=attention_mask, training=training),
            training=training,
        )
        residual = self.feed_forward_residual
        h = residual.normalize_input(x)
        return residual(x, self.feed_forward(h, training=training), training=training)

    def self_attention_weights(self, x, attention_mask=None):
        """Self-attention weights `[batch, heads, length, length]` of this layer for input `x`
        (dropout off): softmax(Q K^T / sqrt(d_k)) per head, rows summing to 1 over the keys
        that `attention_mask` allows."""
        h = self.self_attention_residual.normalize_input(x)
        return self.self_attention.attention_weights(h, attention_mask=attention_mask)

    def compute_output_shape(self, x_shape):
        return x_shape

    def get_config(self):
        return {**super().get_config(), **self.layer_args}


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerEncoder(TransformerStack):
    """The encoder stack: positional encoding and dropout on the embedded source, then N
    `TransformerEncoderLayer`s (and, with pre-norm, a final LayerNorm).

    Args:
        num_layers: N.
        positional: "sinusoidal" or "learned".
        max_length: positions for "learned".

    The remaining args are those of `TransformerEncoderLayer`. The layers are
    `transformer_layers`.

    Call args:
        embedded: `[batch, length, d_model]` source embeddings (already x sqrt(d_model)).
        attention_mask: `[batch, 1, length]` boolean, True at real tokens (`padding_mask`).

    Example:
    >>> encoder = TransformerEncoder(num_layers=2, num_heads=4, key_dim=8, value_dim=8, d_ff=64)
    >>> encoder(keras.random.normal((2, 5, 32))).shape
    (2, 5, 32)
    """

    layer_class = TransformerEncoderLayer

    def build(self, embedded_shape):
        self.build_stack(embedded_shape)

    def call(self, embedded, attention_mask=None, training=None):
        x = self.embedding_dropout(self.positional_layer(embedded), training=training)
        for layer in self.transformer_layers:
            x = layer(x, attention_mask=attention_mask, training=training)
        return self.finish(x)

    def self_attention_weights(self, embedded, attention_mask=None, layer_index=-1):
        """Self-attention weights of one layer (0-based `layer_index`, default: the last),
        `[batch, heads, length, length]`, dropout off: what the paper's figures 3-5 draw."""
        layer_index = self.check_layer_index(layer_index)
        x = self.positional_layer(embedded)
        for layer in self.transformer_layers[:layer_index]:
            x = layer(x, attention_mask=attention_mask)
        return self.transformer_layers[layer_index].self_attention_weights(
            x, attention_mask=attention_mask
        )

    def compute_output_shape(self, embedded_shape):
        return embedded_shape
