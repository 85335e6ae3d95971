"""The decoder: masked self-attention, encoder-decoder attention and feed-forward per layer,
and the stack of N (section 3.1), with the incremental-decoding cache of each layer."""

import keras
from keras import ops

from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.multi_head_attention import MultiHeadAttention
from keras_transformer.layers.residual import ResidualConnection
from keras_transformer.layers.shapes import dim
from keras_transformer.layers.stack import TransformerStack


def causal_mask(query_length, key_length, start_index=0):
    """`[1, query_length, key_length]` boolean: query i (at position start_index + i) may see
    keys 0 .. start_index + i, so that predictions depend only on earlier outputs (3.2.3)."""
    query_positions = ops.arange(query_length) + start_index
    return ops.expand_dims(ops.arange(key_length)[None, :] <= query_positions[:, None], 0)


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerDecoderLayer(keras.layers.Layer):
    """One decoder layer: masked multi-head self-attention, multi-head attention over the
    encoder output, and a position-wise feed-forward network, each inside a residual
    connection with LayerNorm and dropout.

    Args: as `TransformerEncoderLayer`.

    Call args:
        x: `[batch, target_length, d_model]`.
        memory: `[batch, source_length, d_model]` encoder output (may be None when
            `cross_attention_cache` holds its projected keys/values).
        self_attention_mask: `[1 or batch, target_length, key_length]` boolean (`causal_mask`).
        memory_mask: `[batch, 1, source_length]` boolean, True at real source tokens.
        self_attention_cache, cross_attention_cache, cache_update_index: incremental decoding
            (see `MultiHeadAttention`).

    Returns:
        `[batch, target_length, d_model]`, or `(output, self_attention_cache,
        cross_attention_cache)` when caches are given.

    Example:
    >>> layer = TransformerDecoderLayer(num_heads=4, key_dim=8, value_dim=8, d_ff=64)
    >>> x, memory = keras.random.normal((2, 3, 32)), keras.random.normal((2, 5, 32))
    >>> layer(x, memory, self_attention_mask=causal_mask(3, 3)).shape
    (2, 3, 32)
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

        def residual(name):
            return ResidualConnection(
                dropout, norm_position, layer_norm_epsilon, dtype=policy, name=name
            )

        def attention(name):
            return MultiHeadAttention(
                num_heads, key_dim, value_dim, dropout=attention_dropout, dtype=policy, name=name
            )

        self.self_attention = attention("self_attention")
        self.self_attention_residual = residual("self_attention_residual")
        self.cross_attention = attention("cross_attention")
        self.cross_attention_residual = residual("cross_attention_residual")
        self.feed_forward = PositionwiseFeedForward(
            d_ff,
            relu_dropout=relu_dropout,
            activation=activation,
            dtype=policy,
            name="feed_forward",
        )
        self.feed_forward_residual = residual("feed_forward_residual")

    def build(self, x_shape, memory_shape=None):
        memory_shape = x_shape if memory_shape is None else memory_shape
        self.self_attention.build(x_shape)
        self.cross_attention.build(x_shape, memory_shape)
        self.feed_forward.build(x_shape)
        for layer in (
            self.self_attention_residual,
            self.cross_attention_residual,
            self.feed_forward_residual,
        ):
            layer.build(x_shape)

    def call(
        self,
        x,
        memory=None,
        self_attention_mask=None,
        memory_mask=None,
        self_attention_cache=None,
        cross_attention_cache=None,
        cache_update_index=None,
        training=None,
    ):
        residual = self.self_attention_residual
        h = residual.normalize_input(x)
        attended = self.self_attention(
            h,
            attention_mask=self_attention_mask,
            cache=self_attention_cache,
            cache_update_index=cache_update_index,
            training=training,
        )
        if self_attention_cache is not None:
            attended, self_attention_cache = attended
        x = residual(x, attended, training=training)

        residual = self.cross_attention_residual
        h = residual.normalize_input(x)
        attended = self.cross_attention(
            h, memory, attention_mask=memory_mask, cache=cross_attention_cache, training=training
        )
        if cross_attention_cache is not None:
            attended, cross_attention_cache = attended
        x = residual(x, attended, training=training)

        residual = self.feed_forward_residual
        h = residual.normalize_input(x)
        x = residual(x, self.feed_forward(h, training=training), training=training)
        if self_attention_cache is None and cross_attention_cache is None:
            return x
        return x, self_attention_cache, cross_attention_cache

    def self_attention_weights(self, x, self_attention_mask=None):
        """Masked self-attention weights `[batch, heads, target_length, target_length]` of
        this layer for input `x` (dropout off)."""
        h = self.self_attention_residual.normalize_input(x)
        return self.self_attention.attention_weights(h, attention_mask=self_attention_mask)

    def cross_attention_weights(self, x, memory, self_attention_mask=None, memory_mask=None):
        """Encoder-decoder attention weights `[batch, heads, target_length, source_length]`
        of this layer for input `x` (dropout off)."""
        residual = self.self_attention_residual
        h = residual.normalize_input(x)
        x = residual(x, self.self_attention(h, attention_mask=self_attention_mask))
        h = self.cross_attention_residual.normalize_input(x)
        return self.cross_attention.attention_weights(h, memory, attention_mask=memory_mask)

    def compute_output_shape(self, x_shape, memory_shape=None):
        return x_shape

    def get_config(self):
        return {**super().get_config(), **self.layer_args}


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerDecoder(TransformerStack):
    """The decoder stack: positional encoding and dropout on the embedded target (shifted
    right), then N `TransformerDecoderLayer`s (and, with pre-norm, a final LayerNorm).

    Args: as `TransformerEncoder`.

    Call args:
        embedded: `[batch, target_length, d_model]` target embeddings (x sqrt(d_model)).
        memory: `[batch, source_length, d_model]` encoder output.
        memory_mask: `[batch, 1, source_length]` boolean, True at real source tokens.
        cache: for incremental decoding, a list with one `(self_attention_cache,
            cross_attention_cache)` per layer, from `init_cache`.
        cache_update_index: the decoding step (the position of `embedded[:, 0]`).

    Returns:
        `[batch, target_length, d_model]`, or `(output, cache)` when a cache is given.

    Example:
    >>> decoder = TransformerDecoder(num_layers=2, num_heads=4, key_dim=8, value_dim=8, d_ff=64)
    >>> decoder(keras.random.normal((2, 3, 32)), keras.random.normal((2, 5, 32))).shape
    (2, 3, 32)
    """

    layer_class = TransformerDecoderLayer

    def build(self, embedded_shape, memory_shape=None):
        self.build_stack(embedded_shape, memory_shape)

    def _layer_input(self, embedded, memory, memory_mask, layer_index):
        """The input of layer `layer_index` (dropout off), its causal mask and the index."""
        layer_index = self.check_layer_index(layer_index)
        x = self.positional_layer(embedded)
        length = ops.shape(x)[1]
        self_mask = causal_mask(length, length)
        for layer in self.transformer_layers[:layer_index]:
            x = layer(x, memory, self_attention_mask=self_mask, memory_mask=memory_mask)
        return x, self_mask, self.transformer_layers[layer_index]

    def self_attention_weights(self, embedded, memory, memory_mask=None, layer_index=-1):
        """Masked self-attention weights of one layer (0-based, default: the last),
        `[batch, heads, target_length, target_length]`, dropout off; zero above the
        diagonal. `memory` feeds the layers below it."""
        x, self_mask, layer = self._layer_input(embedded, memory, memory_mask, layer_index)
        return layer.self_attention_weights(x, self_attention_mask=self_mask)

    def cross_attention_weights(self, embedded, memory, memory_mask=None, layer_index=-1):
        """Encoder-decoder attention weights of one layer (0-based, default: the last),
        `[batch, heads, target_length, source_length]`, dropout off."""
        x, self_mask, layer = self._layer_input(embedded, memory, memory_mask, layer_index)
        return layer.cross_attention_weights(
            x, memory, self_attention_mask=self_mask, memory_mask=memory_mask
        )

    def init_cache(self, memory, max_length):
        """Per-layer caches for decoding up to `max_length` tokens against `memory`: empty
        self-attention slots, and encoder-decoder keys/values projected once."""
        batch_size = ops.shape(memory)[0]
        return [
            (
                layer.self_attention.init_cache(batch_size, max_length),
                layer.cross_attention.compute_cache(memory),
            )
            for layer in self.transformer_layers
        ]

    def call(
        self,
        embedded,
        memory=None,
        memory_mask=None,
        cache=None,
        cache_update_index=None,
        training=None,
    ):
        start = 0 if cache_update_index is None else cache_update_index
        x = self.positional_layer(embedded, start_index=start)
        x = self.embedding_dropout(x, training=training)
        query_length = dim(x, 1)
        if cache is None:
            self_mask = causal_mask(query_length, query_length)
        else:
            self_mask = causal_mask(query_length, dim(cache[0][0][0], 2), start)
        new_cache = []
        for i, layer in enumerate(self.transformer_layers):
            if cache is None:
                x = layer(
                    x,
                    memory,
                    self_attention_mask=self_mask,
                    memory_mask=memory_mask,
                    training=training,
                )
            else:
                x, self_cache, cross_cache = layer(
                    x,
                    memory,
                    self_attention_mask=self_mask,
                    memory_mask=memory_mask,
                    self_attention_cache=cache[i][0],
                    cross_attention_cache=cache[i][1],
                    cache_update_index=start,
                    training=training,
                )
                new_cache.append((self_cache, cross_cache))
        x = self.finish(x)
        return x if cache is None else (x, new_cache)

    def compute_output_shape(self, embedded_shape, memory_shape=None):
        return embedded_shape
