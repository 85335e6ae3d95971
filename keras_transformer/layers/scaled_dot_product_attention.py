"""Scaled dot-product attention (paper section 3.2.1, equation 1)."""

import math

import keras
from keras import ops

from keras_transformer.layers.dropout import Dropout


@keras.saving.register_keras_serializable(package="keras_transformer")
class ScaledDotProductAttention(keras.layers.Layer):
    """softmax(Q K^T / sqrt(d_k) + mask) V over heads.

    Uses `keras.ops.dot_product_attention` (fused kernels where the backend has them). That op
    cannot drop attention weights, and on JAX it needs d_k == d_v; for attention dropout
    during training, or d_k != d_v (Table 3 row B), the same computation is written out in
    `keras.ops`.

    Args:
        dropout: dropout rate on the attention weights (default 0, as the paper).

    Call args:
        query: `[batch, target_length, heads, key_dim]`.
        key: `[batch, source_length, heads, key_dim]`.
        value: `[batch, source_length, heads, value_dim]`.
        attention_mask: optional boolean, broadcastable to `[batch, heads, target_length,
            source_length]`; True where attention is allowed.
        training: whether dropout is active.

    Returns:
        `[batch, target_length, heads, value_dim]`.

    Example:
    >>> attention = ScaledDotProductAttention()
    >>> q = keras.random.normal((2, 5, 4, 16))
    >>> kv = keras.random.normal((2, 7, 4, 16))
    >>> attention(q, kv, kv).shape
    (2, 5, 4, 16)
    """

    def __init__(self, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.dropout = dropout
        self._dropout_layer = Dropout(dropout, dtype=self.dtype_policy)

    def call(self, query, key, value, attention_mask=None, training=None):
        scale = 1.0 / math.sqrt(query.shape[-1])
        dropping = bool(training) and self.dropout > 0
        if not dropping and query.shape[-1] == value.shape[-1]:
            options = {}
            if (
                keras.backend.backend() == "jax"
                and attention_mask is not None
                and attention_mask.shape[-2] == 1
            ):
                # JAX's cuDNN attention refuses a mask broadcast over the queries (padding
                # masks, [batch, 1, 1, keys]: "Bias must have same seq length as QKV") and
                # Keras logs that traceback at every trace before falling back to XLA's
                # attention: ask for XLA's directly.
                options["flash_attention"] = False
            return ops.dot_product_attention(
                query, key, value, mask=attention_mask, scale=scale, **options
            )
        logits = ops.einsum("btnh,bsnh->bnts", query, key) * ops.cast(scale, query.dtype)
        if attention_mask is not None:
            # A large negative number, not -inf: a row with no allowed key stays finite.
            logits = ops.where(attention_mask, logits, ops.cast(-1e9, logits.dtype))
        weights = ops.softmax(ops.cast(logits, "float32"), axis=-1)
        weights = self._dropout_layer(ops.cast(weights, value.dtype), training=training)
        return ops.einsum("bnts,bsnh->btnh", weights, value)

    def get_config(self):
        return {**super().get_config(), "dropout": self.dropout}
