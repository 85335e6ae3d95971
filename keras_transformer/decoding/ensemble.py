"""Ensemble decoding: several models translate together, combining their distributions.

No TensorFlow toolkit offers this; fairseq users expect it. Every model encodes the source
and keeps its own caches; each step combines their next-token log-probabilities:

- `"log_probs"` (default): the mean of the log-probabilities, a product of experts;
- `"probs"`: the log of the mean of the probabilities, fairseq's convention.

The models must share the vocabulary and the special ids (they may differ in size or depth).
"""

import math

from keras import ops

from keras_transformer.decoding.incremental import as_decoder

COMBINATIONS = ("log_probs", "probs")


class EnsembleDecoder:
    """A decoder (see `incremental.py`) over several `Transformer`s.

    Args:
        models: `Transformer`s (or decoders) with the same vocabulary.
        combine: `"log_probs"` (mean log-probability) or `"probs"` (log mean probability).

    Example:
    >>> ensemble = EnsembleDecoder([model_a, model_b])
    >>> result = BeamSearch(beam_size=4)(ensemble, source_ids)
    """

    def __init__(self, models, combine="log_probs"):
        if combine not in COMBINATIONS:
            raise ValueError(f"combine must be one of {COMBINATIONS}, got {combine!r}")
        self.decoders = [as_decoder(model) for model in models]
        if not self.decoders:
            raise ValueError("an ensemble needs at least one model")
        first = self.decoders[0]
        for index, decoder in enumerate(self.decoders[1:], start=1):
            for field in ("vocab_size", "pad_id", "bos_id", "eos_id"):
                if getattr(decoder, field) != getattr(first, field):
                    raise ValueError(
                        f"ensemble model {index} has {field}={getattr(decoder, field)}, model 0 "
                        f"has {getattr(first, field)}: ensembled models must share the "
                        "vocabulary"
                    )
        self.combine = combine
        self.vocab_size = first.vocab_size
        self.pad_id, self.bos_id, self.eos_id = first.pad_id, first.bos_id, first.eos_id
        self.max_length = min(decoder.max_length for decoder in self.decoders)
        # Caches grow during decoding only if every member's can.
        if all(hasattr(decoder, "grow_state") for decoder in self.decoders):
            self.grow_state = self._grow_members

    @property
    def variables(self):
        return [
            variable for decoder in self.decoders for variable in getattr(decoder, "variables", [])
        ]

    def initial_state(self, source_ids, max_length):
        states = [decoder.initial_state(source_ids, max_length) for decoder in self.decoders]
        return tuple(static for static, _ in states), tuple(dynamic for _, dynamic in states)

    def _grow_members(self, dynamic, max_length):
        return tuple(
            decoder.grow_state(model_dynamic, max_length)
            for decoder, model_dynamic in zip(self.decoders, dynamic)
        )

    def step(self, token_ids, static, dynamic, step):
        outputs = [
            decoder.step(token_ids, model_static, model_dynamic, step)
            for decoder, model_static, model_dynamic in zip(self.decoders, static, dynamic)
        ]
        log_probs = ops.stack([log_probs for log_probs, _ in outputs], axis=0)
        if self.combine == "log_probs":
            combined = ops.mean(log_probs, axis=0)
        else:
            combined = ops.logsumexp(log_probs, axis=0) - math.log(len(self.decoders))
        return combined, tuple(model_dynamic for _, model_dynamic in outputs)
