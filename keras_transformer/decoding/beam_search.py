"""Beam search with a length penalty and early exit (paper section 6.1).

Written here because no library does it right for Keras 3: keras-hub's `BeamSampler` has no
length normalization and keeps no finished hypotheses apart from the alive ones.

The search keeps two sets of `beam_size` hypotheses per sentence, as tensor2tensor does:

- *alive*: hypotheses still growing, ranked by log P(Y|X);
- *finished*: hypotheses that emitted eos or reached the sentence's length cap, ranked by
  score = log P(Y|X) / lp(|Y|), lp = ((5 + |Y|) / 6) ** alpha (GNMT, the paper's) or
  |Y| ** alpha ("power", `keras_transformer.decoding.length_penalty`).

Each step extends every alive hypothesis by every token and takes the `2 * beam_size` best
candidates (at most `beam_size` of them end in eos, so at least `beam_size` can stay alive).
As in any beam of width k, a candidate finishes only if it ranks among the `beam_size` best of
the step; the alive set is then refilled with the best candidates that did not finish. With a
beam of one this is exactly greedy search (when alpha = 0).

Early exit: log-probabilities only fall as a hypothesis grows, and for alpha >= 0 either
penalty only grows, so an alive hypothesis with log-probability s <= 0 can reach at most
s / lp(length cap): a longer output divides by more, which can only raise a negative score.
A sentence is done when its `num_hypotheses`-th best finished score is at least that bound for
its best alive hypothesis: nothing alive can enter the n-best any more, so the search returns
what running to the cap would. The loop stops when every sentence is done or at the longest
cap.

Hugging Face transformers' `generate` (5.x) ranks and finishes hypotheses as this search does
(the 2k best candidates a step, of which only the best k may finish; |Y| as
`length_penalty.py` counts it), but stops by another rule: it waits until `num_beams`
hypotheses have finished, then, with its default `early_stopping=False`, bounds the best
running hypothesis by s / lp(current length) instead of s / lp(cap). For alpha > 0 that is
no bound (the hypothesis may still grow and score higher), so `generate` can stop earlier and
return a shorter output than this search; with `early_stopping="never"` it bounds by the
maximum length as this search does. With alpha = 0 both rules are exact and agree.

A sentence that is done leaves the running batch: its beams, caches and source state are
dropped, so later steps spend no work on it (as CTranslate2 does; real text finishes at
scattered steps). JAX compiles loops over fixed shapes, so there it stays in the batch, masked;
a batch of one sentence keeps its shapes too, so that XLA can compile it.
"""

import collections

import keras
from keras import ops

from keras_transformer.decoding.incremental import (
    NEG_INF,
    as_decoder,
    cache_lengths,
    decoding_loop,
    forbid_early_eos,
    forbid_tokens,
)
from keras_transformer.decoding.length_penalty import (
    LENGTH_PENALTIES,
    length_penalty,
    max_output_lengths,
)
from keras_transformer.decoding.prefix import prefix_tokens_at
from keras_transformer.decoding.result import SearchResult
from keras_transformer.decoding.top_k import top_k
from keras_transformer.layers.shapes import dim, trailing_dims


def _flat_picks(picks, width):
    """Rows of a `[batch * width, ...]` flattening for `picks` `[batch, n]` into `[batch,
    width, ...]` values: `b * width + picks[b, j]`. One index serves every tensor gathered by
    the same picks (`_take_rows`), instead of a `take_along_axis` apiece."""
    rows = ops.arange(ops.shape(picks)[0], dtype="int32")[:, None]
    return rows * width + ops.cast(picks, "int32")


def _take_rows(values, flat_picks):
    """`values[b, picks[b, j]]` for `values` `[batch, width, ...]`, by `_flat_picks`."""
    flat_values = ops.reshape(values, (-1,) + trailing_dims(values, 2))
    return ops.take(flat_values, flat_picks, axis=0)


def _flat_beam_indices(parent_beams, beam_size, sentences=None):
    """Rows of the decoder's `[batch * beams, ...]` layout: `sentences[b] * beam_size +
    parent_beams[b, j]` (`sentences` defaults to `0 .. batch - 1`)."""
    if sentences is None:
        sentences = ops.arange(ops.shape(parent_beams)[0], dtype="int32")
    return ops.reshape(sentences[:, None] * beam_size + parent_beams, (-1,))


def _tile_beams(values, beam_size):
    """`[batch, ...]` -> `[batch * beam_size, ...]`, each row repeated `beam_size` times."""
    return ops.repeat(values, beam_size, axis=0)


def _map_nest(fn, nest):
    if isinstance(nest, (tuple, list)):
        return type(nest)(_map_nest(fn, item) for item in nest)
    return None if nest is None else fn(nest)


def drops_finished_sentences(batch_size=None):
    """Whether the running batch shrinks as its sentences finish: not under JAX, whose
    compiled loops keep fixed shapes (there, done sentences stay in the batch, masked), nor
    for a batch of one sentence (`batch_size` 1), which ends when its sentence does; its
    fixed shapes let XLA compile it (`Translator(jit_compile=True)`)."""
    return keras.backend.backend() != "jax" and batch_size != 1


# One step's 2k best extensions of the alive hypotheses: ids `[n, 2k, length]`, log-probs,
# last tokens, parent beams, whether each ends (eos or the cap) and whether it finishes.
_Candidates = collections.namedtuple(
    "_Candidates", ["ids", "log_probs", "tokens", "beams", "ends", "finishes"]
)


class BeamSearch:
    """Beam search with length penalty, separate finished hypotheses and early exit.

    Args:
        beam_size: hypotheses kept alive per sentence (paper: 4).
        alpha: length-penalty strength (paper: 0.6; 0 ranks by log-probability).
        length_penalty: "gnmt" (((5 + |Y|) / 6) ** alpha, the paper's) or "power"
            (|Y| ** alpha, as Marian and Hugging Face); in an exported graph also a scalar
            boolean tensor, True for "power".
        max_extra_length: output tokens allowed beyond the source length (paper: 50); the cap
            is also at most the model's `max_length`.
        num_hypotheses: how many finished hypotheses to return per sentence (n-best),
            at most `beam_size`. The early exit waits for that many, so a search asked for
            fewer stops sooner.
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

    def __init__(
        self,
        beam_size=4,
        alpha=0.6,
        max_extra_length=50,
        num_hypotheses=1,
        min_length=0,
        length_penalty="gnmt",
    ):
        if not isinstance(beam_size, int) or beam_size < 1:
            raise ValueError(f"beam_size must be a positive integer, got {beam_size!r}")
        # alpha, max_extra_length and num_hypotheses may also be scalar tensors: an exported
        # graph takes them per request (and checks their range itself).
        if not ops.is_tensor(num_hypotheses) and (
            not isinstance(num_hypotheses, int) or not 1 <= num_hypotheses <= beam_size
        ):
            raise ValueError(
                f"num_hypotheses must be in [1, beam_size={beam_size}], got {num_hypotheses!r}"
            )
        if isinstance(alpha, (int, float)) and alpha < 0:
            # The early-exit bound assumes a penalty that grows with length.
            raise ValueError(f"alpha must be >= 0, got {alpha!r}")
        if isinstance(max_extra_length, (int, float)) and (
            not isinstance(max_extra_length, int) or max_extra_length < 0
        ):
            raise ValueError(
                f"max_extra_length must be a non-negative integer, got {max_extra_length!r}"
            )
        if not ops.is_tensor(length_penalty) and length_penalty not in LENGTH_PENALTIES:
            raise ValueError(
                f"length_penalty must be one of {LENGTH_PENALTIES}, got {length_penalty!r}"
            )
        self.beam_size = beam_size
        self.length_penalty = length_penalty
        self.alpha = float(alpha) if isinstance(alpha, (int, float)) else alpha
        self.max_extra_length = max_extra_length
        self.num_hypotheses = num_hypotheses
        self.min_length = int(min_length)

    def __call__(self, model, source_ids, prefix_ids=None):
        decoder = as_decoder(model)
        k = self.beam_size
        source_ids = ops.convert_to_tensor(source_ids, "int32")
        batch_size = ops.shape(source_ids)[0]
        caps, buffer_length = max_output_lengths(
            source_ids, decoder.pad_id, self.max_extra_length, decoder.max_length
        )
        lengths = cache_lengths(decoder, buffer_length)
        dropping = drops_finished_sentences(source_ids.shape[0])
        if dropping:
            # A running batch of unknown size from the start, so that the loop may shrink it.
            sentences = ops.cast(ops.nonzero(ops.ones((batch_size,), "bool"))[0], "int32")
            source_ids, caps = ops.take(source_ids, sentences, 0), ops.take(caps, sentences, 0)
        else:
            sentences = ops.arange(batch_size, dtype="int32")
        # Each sentence is encoded once and its state copied to its k beams: encoding the
        # tiled source would run the encoder (and the cross-attention projections) k times.
        static, dynamic = _map_nest(
            lambda value: _tile_beams(value, k), decoder.initial_state(source_ids, lengths[0])
        )
        rows = (static,)
        if prefix_ids is not None:
            prefixes = ops.take(ops.convert_to_tensor(prefix_ids, "int32"), sentences, 0)
            rows = (static, _tile_beams(prefixes, k))
        running_size = ops.shape(source_ids)[0]
        running = (sentences, caps, ops.zeros((running_size,), "bool"))
        state = (
            ops.convert_to_tensor(0, "int32"),
            running,
            _first_alive(running_size, k, buffer_length, decoder),
            _no_finished(batch_size, k, buffer_length, decoder.pad_id),
            rows,
            dynamic,
        )

        def not_done(step, running, *_):
            return ops.logical_and(step < buffer_length, ops.logical_not(ops.all(running[2])))

        def one_step(step, running, alive, finished, rows, dynamic):
            log_probs, dynamic = decoder.step(
                ops.reshape(alive[2], (-1, 1)), rows[0], dynamic, step
            )
            log_probs = forbid_tokens(log_probs, (decoder.pad_id, decoder.bos_id))
            log_probs = forbid_early_eos(log_probs, decoder.eos_id, step, self.min_length)
            prefixes = rows[1] if len(rows) > 1 else None
            candidates = self._candidates(log_probs, alive, step, running[1], decoder, prefixes)
            alive, parent_beams = self._next_alive(candidates, running[2])
            finished, running_scores = self._next_finished(
                finished, candidates, running[0], step + 1
            )
            running = self._check_done(running, alive[1], running_scores)
            running, alive, rows, dynamic = _drop_finished(
                running, alive, rows, dynamic, parent_beams, k, dropping
            )
            return step + 1, running, alive, finished, rows, dynamic

        _, _, _, finished, _, _ = decoding_loop(decoder, not_done, one_step, state, lengths)
        ids, log_probs, scores, lengths = (value[:, : self.num_hypotheses] for value in finished)
        return SearchResult(ids, lengths, log_probs, scores)

    def _candidates(self, log_probs, alive, step, caps, decoder, prefixes=None):
        """The 2k best one-token extensions of the alive hypotheses (`_Candidates`); with
        `prefixes` (`[batch * k, length]`), those of a prefix's token where it has one."""
        alive_ids, alive_log_probs, _ = alive
        k, vocab_size = self.beam_size, decoder.vocab_size
        log_probs = ops.reshape(log_probs, (-1, k, vocab_size))
        totals = ops.reshape(alive_log_probs[:, :, None] + log_probs, (-1, k * vocab_size))
        candidate_log_probs, flat_indices = top_k(totals, 2 * k)
        if prefixes is not None:
            candidate_log_probs, flat_indices = _forced_candidates(
                candidate_log_probs,
                flat_indices,
                log_probs,
                alive_log_probs,
                prefixes,
                step,
                decoder,
            )
        beams = flat_indices // vocab_size
        tokens = ops.cast(flat_indices % vocab_size, "int32")
        positions = ops.arange(dim(alive_ids, 2))
        parent_ids = _take_rows(alive_ids, _flat_picks(beams, k))
        ids = ops.where(positions[None, None, :] == step, tokens[:, :, None], parent_ids)
        real = candidate_log_probs > NEG_INF / 2
        ends = ops.logical_or(tokens == decoder.eos_id, (step + 1 >= caps)[:, None])
        finishes = ends & real & (ops.arange(2 * k)[None, :] < k)
        return _Candidates(ids, candidate_log_probs, tokens, beams, ends, finishes)

    def _next_alive(self, candidates, done):
        """The k best candidates that go on, and the beam each one extends."""
        going_on = ops.where(candidates.ends, NEG_INF, candidates.log_probs)
        log_probs, picks = ops.top_k(going_on, self.beam_size)
        log_probs = ops.where(log_probs > NEG_INF / 2, log_probs, NEG_INF)
        log_probs = ops.where(done[:, None], NEG_INF, log_probs)
        rows = _flat_picks(picks, 2 * self.beam_size)
        alive = (_take_rows(candidates.ids, rows), log_probs, _take_rows(candidates.tokens, rows))
        return alive, _take_rows(candidates.beams, rows)

    def _next_finished(self, finished, candidates, sentences, length):
        """The k best of each running sentence's finished set and its candidates that finish,
        written back into the whole batch's `finished`; also the running sentences' scores."""
        k = self.beam_size
        old_ids, old_log_probs, old_scores, old_lengths = (
            ops.take(value, sentences, axis=0) for value in finished
        )
        candidate_scores = candidates.log_probs / length_penalty(
            length, self.alpha, self.length_penalty
        )
        pool_scores = ops.concatenate(
            [old_scores, ops.where(candidates.finishes, candidate_scores, NEG_INF)], axis=1
        )
        scores, picks = ops.top_k(pool_scores, k)
        rows = _flat_picks(picks, 3 * k)
        ids = _take_rows(ops.concatenate([old_ids, candidates.ids], axis=1), rows)
        log_probs = _take_rows(ops.concatenate([old_log_probs, candidates.log_probs], 1), rows)
        new_lengths = ops.full_like(candidates.tokens, length, "int32")
        lengths = _take_rows(ops.concatenate([old_lengths, new_lengths], axis=1), rows)
        updated = tuple(
            ops.scatter_update(whole, sentences[:, None], part)
            for whole, part in zip(finished, (ids, log_probs, scores, lengths))
        )
        return updated, scores

    def _check_done(self, running, alive_log_probs, finished_scores):
        """Early exit: a sentence is done once its best alive hypothesis cannot beat its n-th
        best finished one (or nothing is alive)."""
        sentences, caps, done = running
        best_alive = alive_log_probs[:, 0]
        bound = best_alive / length_penalty(caps, self.alpha, self.length_penalty)
        nth_finished = ops.take(finished_scores, self.num_hypotheses - 1, axis=1)
        done = done | (best_alive <= NEG_INF / 2) | (nth_finished >= bound)
        return sentences, caps, done

    def get_config(self):
        return {
            "beam_size": self.beam_size,
            "alpha": self.alpha,
            "max_extra_length": self.max_extra_length,
            "num_hypotheses": self.num_hypotheses,
            "min_length": self.min_length,
            "length_penalty": self.length_penalty,
        }


def _first_alive(running_size, beam_size, buffer_length, decoder):
    """The alive set before step 0: bos, and only beam 0 alive, so that step 0 does not pick
    k copies of one token."""
    first_log_probs = ops.concatenate(
        [ops.zeros((running_size, 1)), ops.full((running_size, beam_size - 1), NEG_INF)], axis=1
    )
    return (
        ops.full((running_size, beam_size, buffer_length), decoder.pad_id, "int32"),
        ops.cast(first_log_probs, "float32"),
        ops.full((running_size, beam_size), decoder.bos_id, "int32"),
    )


def _no_finished(batch_size, beam_size, buffer_length, pad_id):
    """An empty finished set for the whole batch: ids, log-probs, scores, lengths."""
    return (
        ops.full((batch_size, beam_size, buffer_length), pad_id, "int32"),
        ops.full((batch_size, beam_size), NEG_INF, "float32"),
        ops.full((batch_size, beam_size), NEG_INF, "float32"),
        ops.zeros((batch_size, beam_size), "int32"),
    )


def _forced_candidates(
    candidate_log_probs, flat_indices, log_probs, alive_log_probs, prefixes, step, decoder
):
    """`(log-probs, flat indices)` of the 2k candidates, those of a sentence whose prefix has
    a token at `step` replaced by each beam extended by that token, best first, and k empty
    slots: what the top-k gives after `force_prefix`, whose three passes over beam x
    vocabulary values a step this replaces (docs/decisions.md#prefix-after-top-k)."""
    running_size, k, vocab_size = (ops.shape(log_probs)[i] for i in range(3))
    # All beams of a sentence share its prefix: its first beam's row.
    first_beams = ops.reshape(prefixes, (running_size, k, ops.shape(prefixes)[1]))[:, 0]
    forced, token = prefix_tokens_at(first_beams, step, decoder.pad_id)
    # Each beam's log-probability of its sentence's token, by one gather from the flat values.
    rows = ops.reshape(ops.arange(running_size * k, dtype="int32"), (running_size, k))
    token_log_probs = ops.take(ops.reshape(log_probs, (-1,)), rows * vocab_size + token[:, None])
    # Ties go to the lower beam, as in the top-k over the beams' concatenated rows.
    values, beams = ops.top_k(alive_log_probs + token_log_probs, k)
    values = ops.concatenate([values, ops.full((running_size, k), NEG_INF, values.dtype)], 1)
    indices = ops.concatenate([beams, beams], axis=1) * vocab_size + token[:, None]
    indices = ops.cast(indices, flat_indices.dtype)
    return (
        ops.where(forced[:, None], values, candidate_log_probs),
        ops.where(forced[:, None], indices, flat_indices),
    )


def _drop_finished(running, alive, rows, dynamic, parent_beams, beam_size, dropping):
    """The next step's running batch: the caches reordered by parent beam, and the sentences
    that are done dropped (their outputs are final), so that no later step spends work on
    them, as CTranslate2 does; unless `dropping` is False (`drops_finished_sentences`)."""
    if not dropping:
        flat = _flat_beam_indices(parent_beams, beam_size)
        return running, alive, rows, _map_nest(lambda cache: ops.take(cache, flat, 0), dynamic)
    keep = ops.cast(ops.nonzero(ops.logical_not(running[2]))[0], "int32")
    flat = _flat_beam_indices(ops.take(parent_beams, keep, 0), beam_size, keep)
    dynamic = _map_nest(lambda cache: ops.take(cache, flat, 0), dynamic)

    def kept(rows):
        every_beam = ops.arange(beam_size, dtype="int32")[None, :]
        kept_rows = _flat_beam_indices(every_beam, beam_size, keep)
        return _map_nest(lambda value: ops.take(value, kept_rows, 0), rows)

    # The per-row source state changes only when a sentence leaves.
    rows = ops.cond(
        ops.shape(keep)[0] == ops.shape(running[2])[0], lambda: rows, lambda: kept(rows)
    )
    running = _map_nest(lambda value: ops.take(value, keep, 0), running)
    alive = _map_nest(lambda value: ops.take(value, keep, 0), alive)
    return running, alive, rows, dynamic


def beam_search(
    model,
    source_ids,
    beam_size=4,
    alpha=0.6,
    max_extra_length=50,
    num_hypotheses=1,
    min_length=0,
    length_penalty="gnmt",
):
    """`BeamSearch(beam_size, alpha, ...)(model, source_ids)` in one call."""
    return BeamSearch(
        beam_size, alpha, max_extra_length, num_hypotheses, min_length, length_penalty
    )(model, source_ids)
