"""Beam search with the GNMT length penalty and early exit (paper section 6.1).

Written here because no library does it right for Keras 3: keras-hub's `BeamSampler` has no
length normalization and keeps no finished hypotheses apart from the alive ones.

The search keeps two sets of `beam_size` hypotheses per sentence, as tensor2tensor does:

- *alive*: hypotheses still growing, ranked by log P(Y|X);
- *finished*: hypotheses that emitted eos or reached the sentence's length cap, ranked by
  score = log P(Y|X) / lp(|Y|), lp = ((5 + |Y|) / 6) ** alpha.

Each step extends every alive hypothesis by every token and takes the `2 * beam_size` best
candidates (at most `beam_size` of them end in eos, so at least `beam_size` can stay alive).
As in any beam of width k, a candidate finishes only if it ranks among the `beam_size` best of
the step; the alive set is then refilled with the best candidates that did not finish. With a
beam of one this is exactly greedy search (when alpha = 0).

Early exit: log-probabilities only fall as a hypothesis grows, and for alpha >= 0 the penalty
only grows, so an alive hypothesis with log-probability s can reach at most
s / lp(length cap). A sentence is done when its `num_hypotheses`-th best finished score is at
least that bound for its best alive hypothesis: nothing alive can enter the n-best any more.
The loop stops when every sentence is done or at the longest cap.
"""

from keras import ops

from keras_transformer.decoding.incremental import (
    NEG_INF,
    as_decoder,
    cache_lengths,
    decoding_loop,
    forbid_early_eos,
    forbid_tokens,
)
from keras_transformer.decoding.length_penalty import length_penalty, max_output_lengths
from keras_transformer.decoding.prefix import force_prefix
from keras_transformer.decoding.result import SearchResult


def _gather_beams(values, indices):
    """`values[b, indices[b, j]]` for `values` `[batch, beams, ...]`, `indices` `[batch, n]`."""
    batch_size, num_beams = ops.shape(values)[0], ops.shape(values)[1]
    flat_indices = ops.reshape(ops.arange(batch_size)[:, None] * num_beams + indices, (-1,))
    flat_values = ops.reshape(values, (-1,) + tuple(ops.shape(values)[2:]))
    gathered = ops.take(flat_values, flat_indices, axis=0)
    return ops.reshape(gathered, (batch_size, ops.shape(indices)[1]) + tuple(ops.shape(values)[2:]))


def _gather_flat_beams(values, indices, beam_size):
    """As `_gather_beams` for `values` `[batch * beams, ...]` (the decoder's layout)."""
    batch_size = ops.shape(indices)[0]
    flat_indices = ops.reshape(ops.arange(batch_size)[:, None] * beam_size + indices, (-1,))
    return ops.take(values, flat_indices, axis=0)


def _tile_beams(values, beam_size):
    """`[batch, ...]` -> `[batch * beam_size, ...]`, each row repeated `beam_size` times."""
    return ops.repeat(values, beam_size, axis=0)


def _map_nest(fn, nest):
    if isinstance(nest, (tuple, list)):
        return type(nest)(_map_nest(fn, item) for item in nest)
    return None if nest is None else fn(nest)


class BeamSearch:
    """Beam search with length penalty, separate finished hypotheses and early exit.

    Args:
        beam_size: hypotheses kept alive per sentence (paper: 4).
        alpha: length-penalty strength (paper: 0.6; 0 ranks by log-probability).
        max_extra_length: output tokens allowed beyond the source length (paper: 50); the cap
            is also at most the model's `max_length`.
        num_hypotheses: how many finished hypotheses to return per sentence (n-best),
            at most `beam_size`.
        min_length: no eos before this many output tokens (eos included); 0 by default.
            Benchmarks use it to force the output length of untrained models.

    Call args:
        model: a `Transformer` or a decoder (`IncrementalDecoder`, `EnsembleDecoder`).
        source_ids: `[batch, source_length]` int32, ending with eos, padded with pad.
        prefix_ids: optional `[batch, prefix_length]` target tokens every hypothesis starts
            with, right-padded with pad (`keras_transformer.decoding.prefix`).

    Returns:
        A `SearchResult`: `[batch, num_hypotheses, ...]`, best score first.

    Example:
    >>> search = BeamSearch(beam_size=4, alpha=0.6)
    >>> result = search(model, source_ids)
    >>> result.ids[:, 0]             # the best translation of each sentence, eos-terminated
    """

    def __init__(self, beam_size=4, alpha=0.6, max_extra_length=50, num_hypotheses=1, min_length=0):
        if not isinstance(beam_size, int) or beam_size < 1:
            raise ValueError(f"beam_size must be a positive integer, got {beam_size!r}")
        if not isinstance(num_hypotheses, int) or not 1 <= num_hypotheses <= beam_size:
            raise ValueError(
                f"num_hypotheses must be in [1, beam_size={beam_size}], got {num_hypotheses!r}"
            )
        # alpha and max_extra_length may also be scalar tensors: an exported graph takes them
        # per request (and checks their range itself).
        if isinstance(alpha, (int, float)) and alpha < 0:
            # The early-exit bound assumes a penalty that grows with length.
            raise ValueError(f"alpha must be >= 0, got {alpha!r}")
        if isinstance(max_extra_length, (int, float)) and (
            not isinstance(max_extra_length, int) or max_extra_length < 0
        ):
            raise ValueError(
                f"max_extra_length must be a non-negative integer, got {max_extra_length!r}"
            )
        self.beam_size = beam_size
        self.alpha = float(alpha) if isinstance(alpha, (int, float)) else alpha
        self.max_extra_length = max_extra_length
        self.num_hypotheses = num_hypotheses
        self.min_length = int(min_length)

    def __call__(self, model, source_ids, prefix_ids=None):
        decoder = as_decoder(model)
        k = self.beam_size
        source_ids = ops.convert_to_tensor(source_ids, "int32")
        batch_size = ops.shape(source_ids)[0]
        vocab_size = decoder.vocab_size
        caps, buffer_length = max_output_lengths(
            source_ids, decoder.pad_id, self.max_extra_length, decoder.max_length
        )
        lengths = cache_lengths(decoder, buffer_length)
        # Each sentence is encoded once and its state copied to its k beams: encoding the
        # tiled source would run the encoder (and the cross-attention projections) k times.
        static, dynamic = _map_nest(
            lambda value: _tile_beams(value, k), decoder.initial_state(source_ids, lengths[0])
        )
        positions = ops.arange(buffer_length)
        candidate_ranks = ops.arange(2 * k)[None, :]
        cap_penalty = length_penalty(caps, self.alpha)[:, None]  # [batch, 1]
        if prefix_ids is not None:
            prefix_ids = _tile_beams(ops.convert_to_tensor(prefix_ids, "int32"), k)

        def not_done(step, alive, finished, done, dynamic):
            return ops.logical_and(step < buffer_length, ops.logical_not(ops.all(done)))

        def one_step(step, alive, finished, done, dynamic):
            alive_ids, alive_log_probs, alive_tokens = alive
            log_probs, dynamic = decoder.step(
                ops.reshape(alive_tokens, (-1, 1)), static, dynamic, step
            )
            log_probs = forbid_tokens(log_probs, (decoder.pad_id, decoder.bos_id))
            log_probs = forbid_early_eos(log_probs, decoder.eos_id, step, self.min_length)
            if prefix_ids is not None:
                log_probs = force_prefix(log_probs, prefix_ids, step, decoder.pad_id)
            log_probs = ops.reshape(log_probs, (batch_size, k, vocab_size))

            # The 2k best one-token extensions of the alive hypotheses.
            candidates = ops.reshape(
                alive_log_probs[:, :, None] + log_probs, (batch_size, k * vocab_size)
            )
            candidate_log_probs, flat_indices = ops.top_k(candidates, 2 * k)
            candidate_beams = flat_indices // vocab_size
            candidate_tokens = ops.cast(flat_indices % vocab_size, "int32")
            candidate_ids = _gather_beams(alive_ids, candidate_beams)
            candidate_ids = ops.where(
                positions[None, None, :] == step, candidate_tokens[:, :, None], candidate_ids
            )
            length = step + 1
            real = candidate_log_probs > NEG_INF / 2
            ends = ops.logical_or(candidate_tokens == decoder.eos_id, (length >= caps)[:, None])
            finishes = ends & real & (candidate_ranks < k)

            # Alive: the k best candidates that go on.
            going_on = ops.where(ends, NEG_INF, candidate_log_probs)
            alive_log_probs, picks = ops.top_k(going_on, k)
            alive_log_probs = ops.where(alive_log_probs > NEG_INF / 2, alive_log_probs, NEG_INF)
            alive_log_probs = ops.where(done[:, None], NEG_INF, alive_log_probs)
            alive_ids = _gather_beams(candidate_ids, picks)
            alive_tokens = ops.take_along_axis(candidate_tokens, picks, axis=1)
            parent_beams = ops.take_along_axis(candidate_beams, picks, axis=1)
            dynamic = _map_nest(lambda cache: _gather_flat_beams(cache, parent_beams, k), dynamic)

            # Finished: the k best of the old finished set and the candidates that finish.
            finished_ids, finished_log_probs, finished_scores, finished_lengths = finished
            candidate_scores = candidate_log_probs / length_penalty(length, self.alpha)
            pool_scores = ops.concatenate(
                [finished_scores, ops.where(finishes, candidate_scores, NEG_INF)], axis=1
            )
            finished_scores, picks = ops.top_k(pool_scores, k)
            finished_ids = _gather_beams(
                ops.concatenate([finished_ids, candidate_ids], axis=1), picks
            )
            finished_log_probs = ops.take_along_axis(
                ops.concatenate([finished_log_probs, candidate_log_probs], axis=1), picks, axis=1
            )
            finished_lengths = ops.take_along_axis(
                ops.concatenate(
                    [finished_lengths, ops.full((batch_size, 2 * k), length, "int32")], axis=1
                ),
                picks,
                axis=1,
            )

            # Early exit: can the best alive hypothesis still beat the n-th best finished one?
            best_alive = alive_log_probs[:, 0]
            bound = best_alive / cap_penalty[:, 0]
            nth_finished = finished_scores[:, self.num_hypotheses - 1]
            done = done | (best_alive <= NEG_INF / 2) | (nth_finished >= bound)
            return (
                step + 1,
                (alive_ids, alive_log_probs, alive_tokens),
                (finished_ids, finished_log_probs, finished_scores, finished_lengths),
                done,
                dynamic,
            )

        # Only beam 0 starts alive, so that step 0 does not pick k copies of one token.
        first_alive = ops.concatenate(
            [ops.zeros((batch_size, 1)), ops.full((batch_size, k - 1), NEG_INF)], axis=1
        )
        alive = (
            ops.full((batch_size, k, buffer_length), decoder.pad_id, "int32"),
            ops.cast(first_alive, "float32"),
            ops.full((batch_size, k), decoder.bos_id, "int32"),
        )
        finished = (
            ops.full((batch_size, k, buffer_length), decoder.pad_id, "int32"),
            ops.full((batch_size, k), NEG_INF, "float32"),
            ops.full((batch_size, k), NEG_INF, "float32"),
            ops.zeros((batch_size, k), "int32"),
        )
        state = (
            ops.convert_to_tensor(0, "int32"),
            alive,
            finished,
            ops.zeros((batch_size,), "bool"),
            dynamic,
        )
        _, _, finished, _, _ = decoding_loop(decoder, not_done, one_step, state, lengths)
        ids, log_probs, scores, lengths = (value[:, : self.num_hypotheses] for value in finished)
        return SearchResult(ids, lengths, log_probs, scores)

    def get_config(self):
        return {
            "beam_size": self.beam_size,
            "alpha": self.alpha,
            "max_extra_length": self.max_extra_length,
            "num_hypotheses": self.num_hypotheses,
            "min_length": self.min_length,
        }


def beam_search(
    model, source_ids, beam_size=4, alpha=0.6, max_extra_length=50, num_hypotheses=1, min_length=0
):
    """`BeamSearch(beam_size, alpha, ...)(model, source_ids)` in one call."""
    return BeamSearch(beam_size, alpha, max_extra_length, num_hypotheses, min_length)(
        model, source_ids
    )
