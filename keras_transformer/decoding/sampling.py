"""Random sampling of translations: temperature, top-k and top-p (an option beside beam search).

Sampling draws one token per step from softmax(log_probs / temperature), restricted to the
`top_k` most probable tokens when `top_k > 0`, then to the nucleus of that distribution when
`top_p < 1`: the smallest set of most probable tokens whose mass (after temperature and
top-k, renormalized) reaches `top_p` (Holtzman et al., 2020, https://arxiv.org/abs/1904.09751).
The order temperature, top-k, top-p is that of Hugging Face transformers' logits warpers;
fairseq applies temperature then top-p and ignores top-k when top-p is given, which is this
order with `top_k=0`.

The uniform noise is drawn once, before the loop, and the token is found by inverting the
cumulative distribution: the loop then needs no random state, so it compiles whole on every
backend and a given noise tensor reproduces a given sample.
"""

import keras
from keras import ops

from keras_transformer.decoding.greedy import decode_token_by_token
from keras_transformer.decoding.incremental import NEG_INF, as_decoder
from keras_transformer.decoding.length_penalty import max_output_lengths
from keras_transformer.decoding.settings import check_decoding_settings

# A nucleus whose mass falls short of top_p by no more than this float32 round-off reaches it
# (probabilities 0.5 and 0.3 sum to 0.79999995 in float32, and make a nucleus of top_p=0.8).
TOP_P_TOLERANCE = 1e-6


def nucleus(probs, top_p, candidates):
    """`probs` `[batch, vocab]` with every token outside the nucleus set to 0: the fewest most
    probable tokens whose mass reaches `top_p` (at least one; ties with the least probable
    member stay in). `candidates`: how many tokens can have a probability (top-k's k)."""
    sorted_probs = ops.top_k(probs, candidates)[0]
    mass_before = ops.cumsum(sorted_probs, axis=-1) - sorted_probs
    kept = ops.sum(ops.cast(mass_before < top_p - TOP_P_TOLERANCE, "int32"), axis=-1)
    kept = ops.maximum(kept, 1)
    least_kept = ops.take_along_axis(sorted_probs, kept[:, None] - 1, 1)
    return ops.where(probs < least_kept, ops.zeros_like(probs), probs)


def sample_tokens(log_probs, uniform, top_k=0, temperature=1.0, top_p=1.0):
    """One token per row from `log_probs` `[batch, vocab]`, given `uniform` noise `[batch]`.

    Args:
        log_probs: `[batch, vocab]` float32.
        uniform: `[batch]` float32 in [0, 1).
        top_k: keep only the `top_k` most probable tokens (0 keeps all).
        temperature: divides the log-probabilities (< 1 sharper, > 1 flatter).
        top_p: in (0, 1]; below 1, keep only the nucleus of mass `top_p` (after temperature
            and top-k). 1 keeps all, and computes exactly what plain sampling does.

    Returns:
        `[batch]` int32 token ids.

    Example:
    >>> sample_tokens(keras.ops.log(keras.ops.array([[0.1, 0.9]])), keras.ops.array([0.5]))
    """
    logits = log_probs / temperature
    if top_k:
        kth_best = ops.top_k(logits, top_k)[0][:, -1:]
        logits = ops.where(logits < kth_best, NEG_INF, logits)
    probs = ops.softmax(logits, axis=-1)
    if top_p < 1:
        probs = nucleus(probs, top_p, top_k or ops.shape(log_probs)[-1])
    cumulative = ops.cumsum(probs, axis=-1)
    threshold = uniform[:, None] * cumulative[:, -1:]
    tokens = ops.sum(ops.cast(cumulative <= threshold, "int32"), axis=-1)
    # Round-off can leave the threshold above the last cumulative sum; stay in range, and
    # never land on a token that had no probability.
    tokens = ops.minimum(tokens, ops.shape(log_probs)[-1] - 1)
    return ops.where(
        ops.take_along_axis(probs, tokens[:, None], 1)[:, 0] > 0, tokens, ops.argmax(probs, axis=-1)
    )


def sample(
    model,
    source_ids,
    top_k=0,
    temperature=1.0,
    max_extra_length=50,
    seed=None,
    noise=None,
    alpha=0.0,
    top_p=1.0,
    prefix_ids=None,
    length_penalty="gnmt",
):
    """Samples one translation per sentence.

    Args:
        model: a `Transformer` or a decoder.
        source_ids: `[batch, source_length]` int32, ending with eos, padded with pad.
        top_k: sample among the `top_k` most probable tokens (0: the whole vocabulary).
        temperature: > 0; 1 samples from the model's distribution.
        max_extra_length: output tokens allowed beyond the source length.
        seed: an int or `keras.random.SeedGenerator` for the noise (ignored with `noise`).
        noise: optional `[buffer_length, batch]` uniform noise in [0, 1), where
            `buffer_length = min(source_length + max_extra_length, max_length)`; pass it
            from outside a compiled function so that each call samples anew.
        alpha: length-penalty strength for the reported `scores`.
        length_penalty: its form, "gnmt" or "power" (`length_penalty.py`).
        top_p: nucleus sampling, in (0, 1] (1: off); applied after temperature and top-k.
        prefix_ids: optional `[batch, prefix_length]` target tokens every output starts with,
            right-padded with pad (`keras_transformer.decoding.prefix`).

    Returns:
        A `SearchResult` with one hypothesis per sentence.

    Example:
    >>> result = sample(model, source_ids, top_k=10, temperature=0.8, seed=1)
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0, got {top_k!r}")
    check_decoding_settings(top_p=top_p)
    decoder = as_decoder(model)
    source_ids = ops.convert_to_tensor(source_ids, "int32")
    if noise is None:
        _, buffer_length = max_output_lengths(
            source_ids, decoder.pad_id, max_extra_length, decoder.max_length
        )
        noise = keras.random.uniform((buffer_length, ops.shape(source_ids)[0]), seed=seed)

    def select(log_probs, step):
        return sample_tokens(log_probs, ops.take(noise, step, axis=0), top_k, temperature, top_p)

    return decode_token_by_token(
        decoder,
        source_ids,
        select,
        max_extra_length,
        alpha=alpha,
        prefix_ids=prefix_ids,
        length_penalty=length_penalty,
    )
