"""Multi-head attention with an incremental-decoding cache (paper section 3.2.2)."""

import math

import keras
from keras import ops

from keras_transformer.layers.scaled_dot_product_attention import ScaledDotProductAttention
from keras_transformer.layers.shapes import dense_on_rows, leading_dims, trailing_dims


def _heads_first(x):
    """`[batch, length, heads, dim]` -> `[batch, heads, length, dim]`."""
    return ops.transpose(x, (0, 2, 1, 3))


def _write_cache(cache, update, index):
    """`cache` `[batch, heads, length, dim]` with `update` written at `index` on axis 2.

    One step's token is written with `scatter_update`, not `slice_update`: on TensorFlow
    `slice_update` is `XlaDynamicUpdateSlice`, which stock TF Serving cannot run, and a
    select over the whole cache (the other portable write) costs a pass over the cache.
    """
    update = ops.cast(update, cache.dtype)
    if update.shape[2] != 1:
        return ops.slice_update(cache, (0, 0, index, 0), update)
    # As `[batch * heads, length, dim]` rows, each written at (row, index): fewer index ops
    # per step than (batch, head, index) triples.
    rows = ops.reshape(cache, (-1,) + trailing_dims(cache, 2))
    row_updates = ops.reshape(update, (-1, update.shape[-1]))
    row_index = ops.arange(ops.shape(row_updates)[0], dtype="int32")
    indices = ops.stack([row_index, ops.zeros_like(row_index) + ops.cast(index, "int32")], axis=1)
    written = ops.scatter_update(rows, indices, row_updates)
    return ops.reshape(written, leading_dims(cache, 2) + trailing_dims(cache, 2))


def grow_cache(cache, max_length):
    """A self-attention cache `(keys, values)` lengthened to `max_length` slots (empty slots
    appended): decoding grows its caches as the output grows (see `decoding.incremental`)."""

    def grow(tensor):
        batch_size, num_heads, length, dim = ops.shape(tensor)
        empty = ops.zeros((batch_size, num_heads, max_length - length, dim), tensor.dtype)
        return ops.concatenate([tensor, empty], axis=2)

    return tuple(grow(tensor) for tensor in cache)


def _attend_heads_first(queries, keys, values, mask):
    """softmax(Q K^T / sqrt(d_k)) V with keys and values `[batch, heads, length, dim]`.

    The decoding caches are kept heads first, so that each step multiplies them as they are:
    `keras.ops.dot_product_attention` takes `[batch, length, heads, dim]` and would transpose
    (copy) every cache at every step, a cost that grows with the output length.
    """
    queries = _heads_first(queries) * ops.cast(1.0 / math.sqrt(queries.shape[-1]), queries.dtype)
    logits = ops.einsum("bnth,bnsh->bnts", queries, keys)
    if mask is not None:
        logits = ops.where(mask, logits, ops.cast(-1e9, logits.dtype))
    weights = ops.cast(ops.softmax(ops.cast(logits, "float32"), axis=-1), values.dtype)
    return ops.transpose(ops.einsum("bnts,bnsh->bnth", weights, values), (0, 2, 1, 3))


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, head_i = Attention(Q W_i^Q, ...).

    Keys and values come from the same sequence (`value`): the encoder output for
    encoder-decoder attention, the layer input for self-attention. `key_dim` (d_k) and
    `value_dim` (d_v) are set independently, as Table 3 row (B) changes d_k alone.

    Incremental decoding reads and writes a cache, a pair `(keys, values)` of projected tensors
    shaped `[batch, heads, length, key_dim]` and `[batch, heads, length, value_dim]` (heads
    first, so that decoding steps multiply them without transposing them):

    - self-attention: the cache has a fixed length (the longest output); each step projects
      the new token(s), writes them at `cache_update_index` and attends over the whole cache
      (`attention_mask` must hide the slots not written yet). Fixed shapes keep the decoding
      loop compilable (XLA, `keras.ops.while_loop`).
    - encoder-decoder attention: `compute_cache(memory)` projects the encoder output once;
      calls with that cache and no `cache_update_index` reuse it at every step.

    Args:
        num_heads: h.
        key_dim: d_k, per-head width of queries and keys.
        value_dim: d_v, per-head width of values; defaults to `key_dim`.
        output_dim: width of the output; defaults to the query's last dimension (d_model).
        dropout: dropout on attention weights (default 0, as the paper).
        use_bias: whether the projections have biases.

    Call args:
        query: `[batch, target_length, d_model]`.
        value: `[batch, source_length, d_model]`; None means self-attention on `query`.
        attention_mask: optional boolean `[batch, target_length, source_length]` (or
            broadcastable, e.g. `[batch, 1, source_length]`), True where allowed.
        cache: optional `(keys, values)` as described above.
        cache_update_index: step at which to write the new keys/values into `cache`.
        training: whether dropout is active.

    Returns:
        The output `[batch, target_length, output_dim]`, or `(output, cache)` when a cache is
        given.

    Example:
    >>> attention = MultiHeadAttention(num_heads=8, key_dim=64)
    >>> x = keras.random.normal((2, 10, 512))
    >>> attention(x).shape
    (2, 10, 512)
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        output_dim=None,
        dropout=0.0,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim or key_dim
        self.output_dim = output_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

        def dense(units, name):
            return keras.layers.Dense(
                units,
                use_bias=use_bias,
                kernel_initializer=self.kernel_initializer,
                dtype=self.dtype_policy,
                name=name,
            )

        self.query_dense = dense(num_heads * key_dim, "query")
        self.key_dense = dense(num_heads * key_dim, "key")
        self.value_dense = dense(num_heads * self.value_dim, "value")
        self._output_dense_factory = dense
        self.attention = ScaledDotProductAttention(
            dropout, dtype=self.dtype_policy, name="attention"
        )

    def build(self, query_shape, value_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        self.query_dense.build(query_shape)
        self.key_dense.build(value_shape)
        self.value_dense.build(value_shape)
        self.attention.build(query_shape)  # no weights, but an unbuilt layer makes fit re-trace
        output_dim = self.output_dim or query_shape[-1]
        self.output_dense = self._output_dense_factory(output_dim, "output")
        self.output_dense.build(tuple(query_shape[:-1]) + (self.num_heads * self.value_dim,))

    def _split_heads(self, x, head_dim):
        return ops.reshape(x, leading_dims(x, len(x.shape) - 1) + (self.num_heads, head_dim))

    def _keys_values(self, value):
        """Projects `value` into keys and values `[batch, length, heads, dim]`."""
        return (
            self._split_heads(dense_on_rows(self.key_dense, value), self.key_dim),
            self._split_heads(dense_on_rows(self.value_dense, value), self.value_dim),
        )

    def compute_cache(self, value):
        """The encoder-decoder cache of `value`: `(keys, values)`, heads first."""
        keys, values = self._keys_values(value)
        return _heads_first(keys), _heads_first(values)

    def init_cache(self, batch_size, max_length, dtype=None):
        """An empty self-attention cache for `max_length` decoding steps."""
        dtype = dtype or self.compute_dtype
        return (
            ops.zeros((batch_size, self.num_heads, max_length, self.key_dim), dtype),
            ops.zeros((batch_size, self.num_heads, max_length, self.value_dim), dtype),
        )

    def attention_weights(self, query, value=None, attention_mask=None):
        """softmax(Q K^T / sqrt(d_k)) per head, `[batch, heads, target_length, source_length]`:
        where each query looks (the paper's figures 3-5)."""
        value = query if value is None else value
        queries = self._split_heads(dense_on_rows(self.query_dense, query), self.key_dim)
        keys, _ = self._keys_values(value)
        logits = ops.einsum("btnh,bsnh->bnts", queries, keys) / (self.key_dim**0.5)
        if attention_mask is not None:
            logits = ops.where(ops.expand_dims(attention_mask, 1), logits, -1e9)
        return ops.softmax(ops.cast(logits, "float32"), axis=-1)

    def call(
        self,
        query,
        value=None,
        attention_mask=None,
        cache=None,
        cache_update_index=None,
        training=None,
    ):
        value = query if value is None else value
        queries = self._split_heads(dense_on_rows(self.query_dense, query), self.key_dim)
        mask = None if attention_mask is None else ops.expand_dims(attention_mask, 1)
        if cache is None:
            keys, values = self._keys_values(value)
            heads = self.attention(queries, keys, values, attention_mask=mask, training=training)
        else:
            if cache_update_index is not None:
                new_keys, new_values = self.compute_cache(value)
                cache = (
                    _write_cache(cache[0], new_keys, cache_update_index),
                    _write_cache(cache[1], new_values, cache_update_index),
                )
            heads = _attend_heads_first(queries, cache[0], cache[1], mask)
        merged = ops.reshape(heads, leading_dims(heads, 2) + (self.num_heads * self.value_dim,))
        output = dense_on_rows(self.output_dense, merged)
        return output if cache is None else (output, cache)

    def compute_output_shape(self, query_shape, value_shape=None):
        return tuple(query_shape[:-1]) + (self.output_dim or query_shape[-1],)

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "key_dim": self.key_dim,
            "value_dim": self.value_dim,
            "output_dim": self.output_dim,
            "dropout": self.dropout,
            "use_bias": self.use_bias,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }
