"""Scoring given translations: log P(target | source) by teacher forcing.

The target is fed as in training (`keras_transformer.data.pipeline.add_special_ids`): the
decoder reads bos then the target's pieces, and each position is scored on the next piece,
the last on eos. One forward pass per batch, no search. The log-probabilities are the model's
log-softmax, as decoding uses them (`IncrementalDecoder.step`), so the score of a search's
own output equals the log-probability that search reports for it.
"""

import math

from keras import ops

from keras_transformer.decoding.ensemble import EnsembleDecoder
from keras_transformer.decoding.incremental import IncrementalDecoder


def _members(model):
    """(the `Transformer`s, how an ensemble combines them) of a model, decoder or ensemble."""
    if isinstance(model, EnsembleDecoder):
        models = [member for decoder in model.decoders for member in _members(decoder)[0]]
        return models, model.combine
    if isinstance(model, IncrementalDecoder):
        return [model.model], "log_probs"
    if hasattr(model, "encode") and hasattr(model, "decode"):
        return [model], "log_probs"
    raise TypeError(
        f"scoring needs a Transformer, an IncrementalDecoder or an EnsembleDecoder, got "
        f"{type(model).__name__}"
    )


def token_log_probs(model, source_ids, target_ids):
    """log P(target_ids[:, t] | source, target_ids[:, :t]) per position, 0 at padding.

    Args:
        model: a `Transformer`, its `IncrementalDecoder`, or an `EnsembleDecoder` of them.
        source_ids: `[batch, source_length]` int32, ending with eos, padded with pad.
        target_ids: `[batch, target_length]` int32, the target's pieces then eos, padded
            with pad (the training labels).

    Returns:
        `[batch, target_length]` float32.
    """
    models, combine = _members(model)
    config = models[0].config
    source_ids = ops.convert_to_tensor(source_ids, "int32")
    target_ids = ops.convert_to_tensor(target_ids, "int32")
    bos = ops.full((ops.shape(target_ids)[0], 1), config.bos_id, "int32")
    decoder_inputs = ops.concatenate([bos, target_ids[:, :-1]], axis=1)
    per_model = []
    for member in models:
        memory, memory_mask = member.encode(source_ids)
        log_probs = ops.log_softmax(member.decode(decoder_inputs, memory, memory_mask), axis=-1)
        per_model.append(ops.take_along_axis(log_probs, target_ids[:, :, None], 2)[:, :, 0])
    stacked = ops.stack(per_model, axis=0)
    if combine == "log_probs":
        combined = ops.mean(stacked, axis=0)
    else:  # "probs": the log of the mean probability, as EnsembleDecoder.step
        combined = ops.logsumexp(stacked, axis=0) - math.log(len(models))
    return ops.where(ops.not_equal(target_ids, config.pad_id), combined, 0.0)


def score_targets(model, source_ids, target_ids):
    """The sum of `token_log_probs` per sentence and the number of tokens summed (eos
    included): `([batch] float32, [batch] int32)`; their quotient is the per-token average.

    Example:
    >>> total, count = score_targets(model, source_ids, target_ids)
    """
    log_probs = token_log_probs(model, source_ids, target_ids)
    pad_id = _members(model)[0][0].config.pad_id
    count = ops.sum(ops.cast(ops.not_equal(target_ids, pad_id), "int32"), axis=-1)
    return ops.sum(log_probs, axis=-1), count
