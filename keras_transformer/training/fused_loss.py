"""The pre-softmax projection and the label-smoothed loss in one pass over token chunks.

Training needs only the loss and its gradient, never the logits, yet the plain path writes
float32 logits `[tokens, V]` to memory and reads them back several times (log-sum-exp, the
smoothed target product, then softmax minus target in the backward pass). At Multi30k's dims
(d_model 128, V 10000) that traffic is about a third of a training step on a CPU, and it is
memory-bound. Here the logits of one chunk of tokens at a time (about 10 MB) are made, turned
into the chunk's loss and its gradient with respect to the logits while still in cache, and
dropped; the gradients of the hidden states and of the embedding matrix come out of two
matmuls per chunk, computed in the forward pass (the loss is a scalar, so the backward pass
only scales them). This is the "fused linear cross-entropy" of Liger-Kernel and
"Cut Your Losses" (Wijmans et al., 2024); no Keras or TensorFlow op does it, hence the
hand-written gradient. Same function as `Transformer` logits + `LabelSmoothedCrossEntropy`:
`tests/test_training_fused_loss.py` checks both against NumPy.
"""

import tensorflow as tf

# Elements of one chunk's float32 logits: 2.5M (10 MB, 248 tokens at V 10000) was the fastest
# chunk in float32 and bfloat16 (docs/decisions.md#fused-loss-chunk).
CHUNK_ELEMENTS = 2_500_000


def chunk_tokens(vocab_size, chunk_elements=CHUNK_ELEMENTS):
    """Tokens per chunk so that a chunk's logits hold about `chunk_elements` values."""
    return max(8, min(4096, chunk_elements // max(1, vocab_size)) // 8 * 8)


def fused_projection_loss(hidden, embeddings, labels, label_smoothing, pad_id, chunk=None):
    """Summed label-smoothed cross-entropy of `hidden @ embeddings^T` over non-pad labels.

    Args:
        hidden: `[..., d_model]` decoder output in the compute dtype (float32 or bfloat16;
            float16 needs loss scaling before the cast, so use the plain path there).
        embeddings: `[V, d_model]` pre-softmax weights, already in `hidden`'s dtype.
        labels: int `[...]` next-token ids; `pad_id` labels add nothing.
        label_smoothing: eps_ls: the target is (1 - eps) one-hot + eps / V.
        pad_id: the label id that is not a token.
        chunk: tokens per chunk (default: `chunk_tokens(V)`).

    Returns:
        The float32 sum of the per-token losses (logits computed in float32 from the
        compute-dtype product, as `Transformer` casts them); differentiable with respect to
        `hidden` and `embeddings`.

    Example:
        >>> loss_sum = fused_projection_loss(hidden, matrix, labels, 0.1, pad_id=0)  # doctest: +SKIP
    """
    vocab_size = int(embeddings.shape[0])
    chunk = chunk or chunk_tokens(vocab_size)
    eps = float(label_smoothing)

    @tf.custom_gradient
    def loss_and_gradient(hidden, embeddings):
        d_model = tf.shape(hidden)[-1]
        flat_hidden = tf.reshape(hidden, [-1, d_model])
        flat_labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
        tokens = tf.shape(flat_labels)[0]
        steps = tf.maximum((tokens + chunk - 1) // chunk, 1)
        # Equal chunks of at most `chunk` tokens (fewer than `steps` padding rows, which
        # carry pad labels): a batch smaller than one chunk is one chunk of its own size.
        size = (tokens + steps - 1) // steps
        padding = steps * size - tokens
        flat_hidden = tf.pad(flat_hidden, [[0, padding], [0, 0]])
        flat_labels = tf.pad(flat_labels, [[0, padding]], constant_values=pad_id)

        def body(i, loss_sum, d_embeddings, d_hidden):
            chunk_hidden = tf.slice(flat_hidden, [i * size, 0], [size, -1])
            chunk_labels = tf.slice(flat_labels, [i * size], [size])
            chunk_loss, d_logits = _chunk_loss(
                chunk_hidden, chunk_labels, embeddings, eps, vocab_size, pad_id
            )
            loss_sum += chunk_loss
            d_hidden = d_hidden.write(i, tf.matmul(d_logits, embeddings))
            d_embeddings += tf.cast(tf.matmul(d_logits, chunk_hidden, transpose_a=True), tf.float32)
            return i + 1, loss_sum, d_embeddings, d_hidden

        initial = (
            tf.constant(0),
            tf.constant(0.0),
            tf.zeros(tf.shape(embeddings), tf.float32),
            tf.TensorArray(hidden.dtype, size=steps, element_shape=[None, None]),
        )
        _, loss_sum, d_embeddings, d_hidden = tf.while_loop(
            lambda i, *_: i < steps, body, initial, parallel_iterations=1
        )
        d_hidden = tf.reshape(d_hidden.stack(), [-1, d_model])[:tokens]
        d_hidden = tf.reshape(d_hidden, tf.shape(hidden))

        def gradient(upstream):
            return (
                tf.cast(upstream, hidden.dtype) * d_hidden,
                tf.cast(upstream * d_embeddings, embeddings.dtype),
            )

        return loss_sum, gradient

    return loss_and_gradient(hidden, embeddings)


def _chunk_loss(chunk_hidden, chunk_labels, embeddings, eps, vocab_size, pad_id):
    """The summed loss of one chunk of tokens, and its gradient with respect to the chunk's
    logits (in `chunk_hidden`'s dtype), from logits that exist only here."""
    rows = tf.range(tf.shape(chunk_labels)[0])
    weights = tf.cast(tf.not_equal(chunk_labels, pad_id), tf.float32)[:, None]
    logits = tf.cast(tf.matmul(chunk_hidden, embeddings, transpose_b=True), tf.float32)
    peak = tf.reduce_max(logits, axis=-1, keepdims=True)
    exps = tf.exp(logits - peak)
    total = tf.reduce_sum(exps, axis=-1, keepdims=True)
    label_logit = tf.gather(logits, chunk_labels, batch_dims=1)[:, None]
    # -sum_v q_v z_v + logsumexp(z), as in `losses._smoothed_nll`.
    token_loss = (
        peak
        + tf.math.log(total)
        - (1.0 - eps) * label_logit
        - (eps / vocab_size) * tf.reduce_sum(logits, -1, keepdims=True)
    )
    # d loss / d z = softmax(z) - q, zero on pad rows.
    d_logits = exps * (weights / total) - weights * (eps / vocab_size)
    label_index = tf.stack([rows, chunk_labels], axis=1)
    d_logits = tf.tensor_scatter_nd_sub(d_logits, label_index, (1.0 - eps) * weights[:, 0])
    return tf.reduce_sum(token_loss * weights), tf.cast(d_logits, chunk_hidden.dtype)
