"""Greedy search, and the one-token-per-step loop that greedy search and sampling share."""

from keras import ops

from keras_transformer.decoding.incremental import (
    as_decoder,
    cache_lengths,
    decoding_loop,
    forbid_early_eos,
    forbid_tokens,
)
from keras_transformer.decoding.length_penalty import length_penalty as penalty
from keras_transformer.decoding.length_penalty import max_output_lengths
from keras_transformer.decoding.prefix import force_prefix
from keras_transformer.decoding.result import SearchResult


def decode_token_by_token(
    model,
    source_ids,
    select_tokens,
    max_extra_length=50,
    alpha=0.0,
    min_length=0,
    prefix_ids=None,
    length_penalty="gnmt",
):
    """Decodes one hypothesis per sentence, choosing each token with `select_tokens`.

    The loop is `keras.ops.while_loop`s over fixed-shape state (`decoding_loop`), so it runs
    on every backend and compiles whole (XLA, `jax.jit`). It stops when every sentence has
    emitted eos or reached its length cap (source length + `max_extra_length`, at most the
    model's `max_length`).

    Args:
        model: a `Transformer` or a decoder (see `incremental.py`).
        source_ids: `[batch, source_length]` int32, ending with eos, padded with pad.
        select_tokens: `fn(log_probs [batch, vocab], step) -> token ids [batch]` int32;
            `log_probs` already forbid pad and bos.
        max_extra_length: output tokens allowed beyond the source length.
        alpha: length-penalty strength used for `scores` only (the choice is per token).
        length_penalty: its form, "gnmt" or "power" (`length_penalty.py`).
        min_length: no eos before this many output tokens (eos included).
        prefix_ids: optional `[batch, prefix_length]` target tokens every output starts with,
            right-padded with pad (`keras_transformer.decoding.prefix`).

    Returns:
        A `SearchResult` with one hypothesis per sentence.
    """
    decoder = as_decoder(model)
    source_ids = ops.convert_to_tensor(source_ids, "int32")
    batch_size = ops.shape(source_ids)[0]
    caps, buffer_length = max_output_lengths(
        source_ids, decoder.pad_id, max_extra_length, decoder.max_length
    )
    lengths = cache_lengths(decoder, buffer_length)
    static, dynamic = decoder.initial_state(source_ids, lengths[0])
    positions = ops.arange(buffer_length)

    def not_done(step, tokens, ids, lengths, log_probs, finished, dynamic):
        return ops.logical_and(step < buffer_length, ops.logical_not(ops.all(finished)))

    def one_step(step, tokens, ids, lengths, log_probs, finished, dynamic):
        step_log_probs, dynamic = decoder.step(tokens[:, None], static, dynamic, step)
        step_log_probs = forbid_tokens(step_log_probs, (decoder.pad_id, decoder.bos_id))
        step_log_probs = forbid_early_eos(step_log_probs, decoder.eos_id, step, min_length)
        if prefix_ids is not None:
            step_log_probs = force_prefix(step_log_probs, prefix_ids, step, decoder.pad_id)
        chosen = ops.cast(select_tokens(step_log_probs, step), "int32")
        chosen = ops.where(finished, decoder.pad_id, chosen)
        token_log_probs = ops.take_along_axis(step_log_probs, chosen[:, None], axis=1)[:, 0]
        log_probs = log_probs + ops.where(finished, 0.0, token_log_probs)
        ids = ops.where(
            ops.logical_and(positions[None, :] == step, ops.logical_not(finished)[:, None]),
            chosen[:, None],
            ids,
        )
        lengths = lengths + ops.cast(ops.logical_not(finished), "int32")
        finished = ops.logical_or(
            finished, ops.logical_or(chosen == decoder.eos_id, step + 1 >= caps)
        )
        return step + 1, chosen, ids, lengths, log_probs, finished, dynamic

    state = (
        ops.convert_to_tensor(0, "int32"),
        ops.full((batch_size,), decoder.bos_id, "int32"),
        ops.full((batch_size, buffer_length), decoder.pad_id, "int32"),
        ops.zeros((batch_size,), "int32"),
        ops.zeros((batch_size,), "float32"),
        ops.zeros((batch_size,), "bool"),
        dynamic,
    )
    _, _, ids, lengths, log_probs, _, _ = decoding_loop(decoder, not_done, one_step, state, lengths)
    scores = log_probs / penalty(lengths, alpha, length_penalty)
    return SearchResult(ids[:, None, :], lengths[:, None], log_probs[:, None], scores[:, None])


def greedy_search(
    model,
    source_ids,
    max_extra_length=50,
    alpha=0.0,
    min_length=0,
    prefix_ids=None,
    length_penalty="gnmt",
):
    """Greedy search: the most probable token at every step.

    Args:
        model: a `Transformer` or a decoder (an `EnsembleDecoder`, ...).
        source_ids: `[batch, source_length]` int32, ending with eos, padded with pad.
        max_extra_length: output tokens allowed beyond the source length (paper: 50).
        alpha: length-penalty strength for the reported `scores` (does not change the output).
        length_penalty: its form, "gnmt" or "power" (`length_penalty.py`).
        min_length: no eos before this many output tokens (eos included).
        prefix_ids: optional `[batch, prefix_length]` target tokens every output starts with,
            right-padded with pad (`keras_transformer.decoding.prefix`).

    Returns:
        A `SearchResult` with one hypothesis per sentence.

    Example:
    >>> result = greedy_search(model, source_ids)
    >>> result.ids.shape            # [batch, 1, output length]
    """
    return decode_token_by_token(
        model,
        source_ids,
        lambda log_probs, step: ops.argmax(log_probs, axis=-1),
        max_extra_length=max_extra_length,
        alpha=alpha,
        min_length=min_length,
        prefix_ids=prefix_ids,
        length_penalty=length_penalty,
    )
