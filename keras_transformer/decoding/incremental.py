"""Incremental decoding of a `Transformer`: one token per call over a key/value cache.

A search (greedy, beam, sampling) talks to the model through a *decoder*: an object with

- `vocab_size`, `pad_id`, `bos_id`, `eos_id`, `max_length`, and `variables` (the weights,
  which a compiled search takes as arguments);
- `initial_state(source_ids, max_length) -> (static, dynamic)`: encodes the source once.
  `static` holds what never changes during decoding (the source mask, the encoder-decoder
  keys/values); `dynamic` holds what each step rewrites (the self-attention caches). Both are
  nests of tensors whose first dimension is the batch. Beam search reorders only `dynamic`
  when hypotheses change beams: all beams of a sentence share one source, so their `static`
  rows are equal and need no gather.
- `step(token_ids [N, 1], static, dynamic, step) -> (log_probs [N, vocab], dynamic)`;
- optionally `grow_state(dynamic, max_length) -> dynamic`: the caches lengthened to
  `max_length` steps. With it, `decoding_loop` starts with short caches and lengthens them as
  the output grows (see there); without it, the caches are as long as the longest output.

`IncrementalDecoder` adapts one `Transformer`; `EnsembleDecoder` (ensemble.py) combines several.
"""

from keras import ops

from keras_transformer.layers.multi_head_attention import grow_cache
from keras_transformer.layers.shapes import dim

# Log-probability given to forbidden tokens and empty hypothesis slots. Finite, so that sums
# and differences of it never make NaN; far below any real log-probability.
NEG_INF = -1e9


def is_hypothesis(scores):
    """True where a score belongs to a real hypothesis, not an empty slot."""
    return scores > NEG_INF / 2


def forbid_tokens(log_probs, token_ids):
    """Sets the log-probabilities of `token_ids` (Python ints) to `NEG_INF`.

    Decoding never emits pad or bos: they are inputs, not outputs. The others keep their
    model log-probabilities (no renormalization), so scores stay log P(Y|X).
    """
    vocab_size = dim(log_probs, -1)
    forbidden = ops.zeros((vocab_size,), "bool")
    for token_id in token_ids:
        forbidden = ops.logical_or(forbidden, ops.equal(ops.arange(vocab_size), token_id))
    return ops.where(forbidden, NEG_INF, log_probs)


class IncrementalDecoder:
    """The decoder interface over one `Transformer` (see the module docstring).

    Args:
        model: a `keras_transformer.Transformer`.

    Example:
    >>> decoder = IncrementalDecoder(model)
    >>> static, dynamic = decoder.initial_state(source_ids, max_length=20)
    >>> bos = keras.ops.full((source_ids.shape[0], 1), decoder.bos_id, "int32")
    >>> log_probs, dynamic = decoder.step(bos, static, dynamic, 0)
    """

    def __init__(self, model):
        self.model = model
        config = model.config
        self.vocab_size = config.vocab_size
        self.pad_id = config.pad_id
        self.bos_id = config.bos_id
        self.eos_id = config.eos_id
        self.max_length = config.max_length
        self._output_kernel = None

    @property
    def variables(self):
        return list(self.model.variables)

    def initial_state(self, source_ids, max_length):
        memory, memory_mask = self.model.encode(source_ids)
        cache = self.model.init_cache(memory, max_length)
        static = (memory_mask, tuple(cross for _, cross in cache))
        dynamic = tuple(self_cache for self_cache, _ in cache)
        # Transposed here, once per search, and used by every step of its loop: not a row of
        # `static`, which searches tile and gather by sentence.
        self._output_kernel = self.model.output_kernel()
        return static, dynamic

    def step(self, token_ids, static, dynamic, step):
        memory_mask, cross_caches = static
        cache = [(self_cache, cross) for self_cache, cross in zip(dynamic, cross_caches)]
        logits, cache = self.model.decode_step(
            token_ids, memory_mask, cache, step, self._output_kernel
        )
        log_probs = ops.log_softmax(logits, axis=-1)
        return log_probs, tuple(self_cache for self_cache, _ in cache)

    def grow_state(self, dynamic, max_length):
        return tuple(grow_cache(self_cache, max_length) for self_cache in dynamic)


# Decoding caches start this long and double in each segment of the decoding loop. Each
# segment traces the loop body anew: 64, not 16, halves a search's compile time for a few
# percent of its decoding speed (docs/decisions.md#first-cache-length).
FIRST_CACHE_LENGTH = 64


def cache_lengths(decoder, buffer_length):
    """The self-attention cache length of each segment of `decoding_loop`: 64, 128, 256, ...,
    `buffer_length` (the longest output). A tensor `buffer_length` (an exported graph's
    per-request length) gives `min(64, buffer), min(128, buffer), ...` up to the model's
    `max_length`, and segments past the buffer run no step."""
    if not hasattr(decoder, "grow_state"):
        return [buffer_length]
    bound = buffer_length if isinstance(buffer_length, int) else decoder.max_length
    lengths, length = [], FIRST_CACHE_LENGTH
    while length < bound:
        lengths.append(length)
        length *= 2
    lengths.append(bound)
    if isinstance(buffer_length, int):
        return lengths
    return [ops.minimum(length, buffer_length) for length in lengths]


def decoding_loop(decoder, condition, body, state, lengths):
    """`keras.ops.while_loop(condition, body, state)` for a decoding `state` `(step, ...,
    dynamic)`, run in segments whose caches are `lengths` long (`cache_lengths`).

    A step attends over, writes into and (in beam search) reorders its whole cache: with one
    cache as long as the longest output, every step would cost as much as the last one. The
    loop shapes must stay fixed (XLA, `jax.jit`), so the caches grow between segments
    instead: each segment is a loop over fixed shapes, and a step costs at most twice what a
    cache of exactly its length would.

    Args:
        decoder: the decoder (see the module docstring).
        condition, body: as for `keras.ops.while_loop`; `state[0]` is the step and
            `state[-1]` the decoder's `dynamic` state, `lengths[0]` steps long.
        lengths: the cache length of each segment, from `cache_lengths`.

    A later segment runs (and its caches are grown) only if `condition` still holds at the
    end of the one before: once every sentence is done, growing would only copy the caches.

    Returns:
        The final state, its decoder state replaced by None (the caches of the segments
        differ in length, and the searches need only their outputs).
    """
    length, later = lengths[0], lengths[1:]

    def in_segment(*values):
        return ops.logical_and(values[0] < length, condition(*values))

    state = ops.while_loop(in_segment, body, tuple(state), maximum_iterations=length)
    if not later:
        return tuple(state[:-1]) + (None,)

    def next_segments():
        grown = tuple(state[:-1]) + (decoder.grow_state(state[-1], later[0]),)
        return tuple(decoding_loop(decoder, condition, body, grown, later)[:-1])

    outputs = ops.cond(condition(*state), next_segments, lambda: tuple(state[:-1]))
    return tuple(outputs) + (None,)


def forbid_early_eos(log_probs, eos_id, step, min_length):
    """Forbids eos while the output would be shorter than `min_length` tokens (eos included):
    the token chosen at `step` makes the output `step + 1` tokens long."""
    if not min_length:
        return log_probs
    is_eos = ops.equal(ops.arange(dim(log_probs, -1)), eos_id)
    return ops.where(ops.logical_and(is_eos, step + 1 < min_length), NEG_INF, log_probs)


def as_decoder(model_or_decoder):
    """A `Transformer` wrapped in `IncrementalDecoder`; a decoder is returned unchanged."""
    if hasattr(model_or_decoder, "initial_state") and hasattr(model_or_decoder, "step"):
        return model_or_decoder
    if hasattr(model_or_decoder, "decode_step"):
        return IncrementalDecoder(model_or_decoder)
    raise TypeError(
        f"expected a keras_transformer Transformer or a decoder with initial_state/step, got "
        f"{type(model_or_decoder).__name__}"
    )
