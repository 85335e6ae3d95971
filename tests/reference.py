"""Independent NumPy re-computations of the paper's formulas, used as test references."""

import numpy as np


def softmax(x, axis=-1):
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def attention(q, k, v, mask=None):
    """softmax(Q K^T / sqrt(d_k)) V for q [b, t, n, d], k [b, s, n, d], v [b, s, n, dv];
    mask broadcastable to [b, n, t, s], True where allowed."""
    logits = np.einsum("btnd,bsnd->bnts", q, k) / np.sqrt(q.shape[-1])
    if mask is not None:
        logits = np.where(mask, logits, -1e30)
    return np.einsum("bnts,bsnd->btnd", softmax(logits), v)


def layer_norm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def dense(x, layer):
    kernel, bias = (np.asarray(w) for w in layer.get_weights())
    return x @ kernel + bias


def multi_head_attention(layer, query, value, mask=None):
    """MultiHead(Q, K, V) of section 3.2.2 with the weights of a MultiHeadAttention layer."""
    h = layer.num_heads
    b, t, _ = query.shape
    s = value.shape[1]
    q = dense(query, layer.query_dense).reshape(b, t, h, layer.key_dim)
    k = dense(value, layer.key_dense).reshape(b, s, h, layer.key_dim)
    v = dense(value, layer.value_dense).reshape(b, s, h, layer.value_dim)
    heads = attention(q, k, v, None if mask is None else mask[:, None])
    return dense(heads.reshape(b, t, h * layer.value_dim), layer.output_dense)


def positional_encoding(position, i, d_model):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...), one scalar at a time."""
    angle = position / 10000 ** (2 * (i // 2) / d_model)
    return np.sin(angle) if i % 2 == 0 else np.cos(angle)


def transformer_parameter_count(vocab, n, d, d_ff, h, d_k, d_v):
    """Parameters of the paper's model with biases everywhere and one tied embedding matrix,
    counted term by term (written independently of TransformerConfig.parameter_count)."""
    q_k_v_o = [d * h * d_k + h * d_k, d * h * d_k + h * d_k, d * h * d_v + h * d_v, h * d_v * d + d]
    attention_block = sum(q_k_v_o)
    ffn = (d * d_ff + d_ff) + (d_ff * d + d)
    layer_norm_params = 2 * d
    encoder = n * (attention_block + ffn + 2 * layer_norm_params)
    decoder = n * (2 * attention_block + ffn + 3 * layer_norm_params)
    return vocab * d + encoder + decoder
