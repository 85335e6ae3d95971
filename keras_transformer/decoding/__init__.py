"""Decoding (paper section 6.1): greedy search, beam search, sampling and ensembles.

Everything here is `keras.ops`, the loops included (`keras.ops.while_loop`), so decoding runs
on the TensorFlow, JAX and NumPy backends and compiles whole with XLA or `jax.jit`.

- `greedy_search(model, source_ids)`;
- `BeamSearch(beam_size=4, alpha=0.6, max_extra_length=50, num_hypotheses=1)(model, source_ids)`;
- `sample(model, source_ids, top_k=0, temperature=1.0)`;
- `EnsembleDecoder([model_a, model_b])`, usable wherever a model is;
- `length_penalty(length, alpha, form="gnmt")`: ((5 + length) / 6) ** alpha, or
  length ** alpha for `form="power"`.

Each returns a `SearchResult(ids, lengths, log_probs, scores)`.
"""

from keras_transformer.decoding.beam_search import BeamSearch, beam_search
from keras_transformer.decoding.ensemble import EnsembleDecoder
from keras_transformer.decoding.greedy import decode_token_by_token, greedy_search
from keras_transformer.decoding.incremental import (
    NEG_INF,
    IncrementalDecoder,
    as_decoder,
    is_hypothesis,
)
from keras_transformer.decoding.length_penalty import length_penalty, max_output_lengths
from keras_transformer.decoding.result import SearchResult
from keras_transformer.decoding.sampling import sample, sample_tokens

__all__ = [
    "BeamSearch",
    "EnsembleDecoder",
    "IncrementalDecoder",
    "NEG_INF",
    "SearchResult",
    "as_decoder",
    "beam_search",
    "decode_token_by_token",
    "greedy_search",
    "is_hypothesis",
    "length_penalty",
    "max_output_lengths",
    "sample",
    "sample_tokens",
]
