"""Target prefixes: every hypothesis starts with given target tokens, and the search finishes
the sentence (interactive translation, terminology, auto-completion).

A prefix is a `[batch, prefix_length]` int32 tensor of target token ids, right-padded with
the pad id (a row of pads: no prefix). At step t, a row whose prefix has a token at t keeps
only that token's log-probability and every other token gets `NEG_INF`; past its prefix, a
row decodes freely. Greedy search and sampling call `force_prefix` on the step's
log-probabilities, after forbidding pad and bos, so that one rule serves every search (and an
ensemble, which is just another decoder); beam search applies the same rule to its 2k best
candidates (`prefix_tokens_at`), which picks the same ones at less cost.

Score: the forced tokens keep their model log-probabilities, so a hypothesis's log-probability
is log P(prefix + continuation | source), the whole output, and its score the same divided by
the length penalty of the whole output: what `Translator.score` computes for the output by
teacher forcing. fairseq's `prefix_tokens` counts them alike; CTranslate2 (`target_prefix`)
gives the prefix steps a score of 0, so its score is that of the continuation only.
"""

from keras import ops

from keras_transformer.decoding.incremental import NEG_INF
from keras_transformer.layers.shapes import dim


def force_prefix(log_probs, prefix_ids, step, pad_id):
    """`log_probs` `[N, vocab]` with only the prefix token left at `step` where a row has one.

    Args:
        log_probs: `[N, vocab]` float, the step's log-probabilities.
        prefix_ids: `[N, prefix_length]` int32, right-padded with `pad_id`; prefix_length
            may be 0.
        step: the output position being chosen (a Python int or a scalar tensor).
        pad_id: the padding id (never a prefix token).

    Returns:
        `[N, vocab]`: rows with a prefix token at `step` keep that token's log-probability and
        have `NEG_INF` elsewhere; other rows are `log_probs` unchanged.

    Example:
    >>> force_prefix(keras.ops.log([[0.2, 0.3, 0.5]]), keras.ops.array([[1]]), 0, pad_id=0)
    """
    forced, token = prefix_tokens_at(prefix_ids, step, pad_id)
    other = ops.not_equal(ops.arange(dim(log_probs, -1))[None, :], token[:, None])
    return ops.where(ops.logical_and(forced[:, None], other), NEG_INF, log_probs)


def prefix_tokens_at(prefix_ids, step, pad_id):
    """`(forced [N] bool, token [N] int32)`: whether each row's prefix has a token at `step`,
    and that token (0 where there is none)."""
    prefix_ids = ops.convert_to_tensor(prefix_ids, "int32")
    at_step = ops.equal(ops.arange(dim(prefix_ids, 1)), step)[None, :]
    forced = ops.any(ops.logical_and(at_step, ops.not_equal(prefix_ids, pad_id)), axis=1)
    # A sum over the one position at `step` (0 where there is none): no gather that could
    # go out of range past the prefix, and prefix_length 0 works.
    token = ops.sum(ops.where(at_step, prefix_ids, 0), axis=1)
    return forced, token
