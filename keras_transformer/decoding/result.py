"""`SearchResult`: what every search (greedy, beam, sampling) returns."""

import collections

SearchResult = collections.namedtuple("SearchResult", ["ids", "lengths", "log_probs", "scores"])
SearchResult.__doc__ = """Hypotheses of a batch, best first.

Fields (tensors of the current Keras backend):
    ids: `[batch, num_hypotheses, max_output_length]` int32 output tokens, ending with eos when
        the hypothesis finished before its length cap, then padded with pad ids.
    lengths: `[batch, num_hypotheses]` int32 tokens per hypothesis, eos included.
    log_probs: `[batch, num_hypotheses]` float32 log P(Y|X), summed over the tokens.
    scores: `[batch, num_hypotheses]` float32 ranking scores: log_probs / length penalty.
        A slot that holds no hypothesis (a vocabulary too small to fill the beam) scores
        `NEG_INF`; `is_hypothesis(scores)` tells them apart.
"""
