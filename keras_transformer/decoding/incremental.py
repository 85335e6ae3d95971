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
- `step(token_ids [N, 1], static, dynamic, step) -> (log_probs [N, vocab], dynamic)`.

`IncrementalDecoder` adapts one `Transformer`; `EnsembleDecoder` (ensemble.py) combines several.
"""

from keras import ops

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
    vocab_size = ops.shape(log_probs)[-1]
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

    @property
    def variables(self):
        return list(self.model.variables)

    def initial_state(self, source_ids, max_length):
        memory, memory_mask = self.model.encode(source_ids)
        cache = self.model.init_cache(memory, max_length)
        static = (memory_mask, tuple(cross for _, cross in cache))
        dynamic = tuple(self_cache for self_cache, _ in cache)
        return static, dynamic

    def step(self, token_ids, static, dynamic, step):
        memory_mask, cross_caches = static
        cache = [(self_cache, cross) for self_cache, cross in zip(dynamic, cross_caches)]
        logits, cache = self.model.decode_step(token_ids, memory_mask, cache, step)
        log_probs = ops.log_softmax(logits, axis=-1)
        return log_probs, tuple(self_cache for self_cache, _ in cache)


def forbid_early_eos(log_probs, eos_id, step, min_length):
    """Forbids eos while the output would be shorter than `min_length` tokens (eos included):
    the token chosen at `step` makes the output `step + 1` tokens long."""
    if not min_length:
        return log_probs
    is_eos = ops.equal(ops.arange(ops.shape(log_probs)[-1]), eos_id)
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
