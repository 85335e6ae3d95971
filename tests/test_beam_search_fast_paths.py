"""Beam search's shortcuts against a plain search: each sentence encoded once for its beams,
and no cache growth (nor later segment) once every sentence is done. The reference below is
a straightforward beam search in NumPy over full forward passes (no cache, each hypothesis
its own row of the source), so it shares none of those shortcuts."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer.decoding import BeamSearch, as_decoder, greedy_search, incremental
from keras_transformer.decoding.beam_search import drops_finished_sentences
from keras_transformer.decoding.compiled import compile_search
from tests._decoding_fixtures import (
    BOS,
    EOS,
    PAD,
    MarkovDecoder,
    RowCountingDecoder,
    full_log_probs,
    second_hypothesis_later_table,
    tiny_model,
)

ALPHA = 0.6


@pytest.fixture
def first_segment_16(monkeypatch):
    """Segments of 16, 32, ... slots, so that short outputs of tiny models cross them."""
    monkeypatch.setattr(incremental, "FIRST_CACHE_LENGTH", 16)


def reference_beam_search(model, sources, beam_size, max_extra_length, alpha=ALPHA):
    """The best output (tokens, log-probability, score) of each sentence of `sources` (lists
    of ids): the candidates of each step are the 2k best extensions of the alive hypotheses;
    those of the k best that end (eos or the cap) finish; the alive set is refilled with the k
    best that go on. Runs to each cap (no early exit, which never changes the best)."""
    caps = [min(len(source) + max_extra_length, model.config.max_length) for source in sources]
    source_batch = padded(sources)
    alive = [[((), 0.0)] for _ in sources]
    finished = [[] for _ in sources]  # (score, tokens, log_prob)
    for step in range(max(caps)):
        rows = [(i, beam) for i, hypotheses in enumerate(alive) for beam in range(len(hypotheses))]
        inputs = np.array([[BOS] + list(alive[i][beam][0]) for i, beam in rows], "int32")
        log_probs = full_log_probs(model, source_batch[[i for i, _ in rows]], inputs)[:, -1]
        vocab_size = log_probs.shape[1]
        for i in range(len(sources)):
            candidates = sorted(
                (-(log_prob + log_probs[row, token]), beam * vocab_size + token)
                for row, (sentence, beam) in enumerate(rows)
                if sentence == i
                for log_prob in [alive[i][beam][1]]
                for token in range(vocab_size)
                if np.isfinite(log_probs[row, token])
            )[: 2 * beam_size]
            going_on = []
            for rank, (negative, flat) in enumerate(candidates):
                beam, token = divmod(flat, vocab_size)
                tokens = alive[i][beam][0] + (token,)
                if token == EOS or step + 1 >= caps[i]:
                    if rank < beam_size:
                        score = -negative / ((5 + step + 1) / 6) ** alpha
                        finished[i].append((score, tokens, -negative))
                else:
                    going_on.append((tokens, -negative))
            alive[i] = going_on[:beam_size]
        if not any(alive):
            break
    best = [max(hypotheses, key=lambda item: item[0]) for hypotheses in finished]
    return [(list(tokens), log_prob, score) for score, tokens, log_prob in best]


def padded(sources):
    width = max(len(source) for source in sources)
    return np.array([list(s) + [PAD] * (width - len(s)) for s in sources], "int32")


@pytest.mark.usefixtures("first_segment_16")
def test_beam_search_of_a_padded_batch_equals_a_plain_search():
    # Caps of 14 to 21 steps: two cache segments (16, then 24); some sentences end with eos
    # early, others run to their caps, so they finish at different steps.
    # A seed's random weights differ by backend; these give both kinds of sentence on each.
    seed = {"jax": 5}.get(keras.backend.backend(), 4)
    model = tiny_model(vocab_size=9, max_length=24, seed=seed, sharpen=2.0)
    rng = np.random.default_rng(0)
    sources = [list(rng.integers(4, 9, size=n)) + [EOS] for n in (1, 8, 4, 6, 2, 5)]
    search = BeamSearch(beam_size=3, alpha=ALPHA, max_extra_length=12)
    run = compile_search(lambda source_ids: tuple(search(model, source_ids)), as_decoder(model))
    ids, lengths, log_probs, scores = (ops.convert_to_numpy(x) for x in run(padded(sources)))
    assert max(lengths[:, 0]) > incremental.FIRST_CACHE_LENGTH  # a later segment ran
    assert min(lengths[:, 0]) < 5  # and a sentence ended early
    expected = reference_beam_search(model, sources, 3, 12)
    for row, (tokens, log_prob, score) in enumerate(expected):
        # Tokens exactly; scores to float32 rounding (the reference sums float64 log-softmaxes
        # of full forward passes, the search float32 ones of cached steps).
        assert ids[row, 0, : lengths[row, 0]].tolist() == tokens, row
        assert log_probs[row, 0] == pytest.approx(log_prob, abs=1e-4)
        assert scores[row, 0] == pytest.approx(score, abs=1e-4)


@pytest.mark.usefixtures("first_segment_16")
@pytest.mark.parametrize("search", ["beam", "greedy"])
def test_a_search_over_unknown_shapes_equals_one_over_known_shapes(search):
    # An export traces its searches for [None, None] sources: the segments' lengths are then
    # tensors (16, 32, 40, each capped at the batch's buffer) where known shapes give ints.
    if keras.backend.backend() != "tensorflow":
        pytest.skip("unknown shapes need a tf.function input signature")
    import tensorflow as tf

    model = tiny_model(vocab_size=9, max_length=40, seed=4, sharpen=2.0)
    rng = np.random.default_rng(0)
    source_ids = padded([list(rng.integers(4, 9, size=n)) + [EOS] for n in (1, 8, 4, 6, 2, 5)])

    def run(source_ids):
        if search == "beam":
            beam = BeamSearch(beam_size=3, alpha=ALPHA, max_extra_length=20)
            return tuple(beam(model, source_ids))
        return tuple(greedy_search(model, source_ids, 20))

    known = compile_search(run, as_decoder(model))(source_ids)
    unknown = tf.function(
        run, input_signature=[tf.TensorSpec([None, None], tf.int32)], autograph=False
    )(source_ids)
    known, unknown = ([ops.convert_to_numpy(x) for x in result] for result in (known, unknown))
    assert known[1].max() > incremental.FIRST_CACHE_LENGTH  # a later segment ran
    for expected, got in zip(known, unknown):
        np.testing.assert_allclose(got, expected, atol=1e-5)


class GrowthCountingDecoder(MarkovDecoder):
    """A scripted decoder with a one-slot cache that counts how often it is grown."""

    def __init__(self, table, max_length):
        super().__init__(table, max_length)
        self.grown_to = []

    def grow_state(self, dynamic, max_length):
        self.grown_to.append(max_length)
        return tuple(ops.pad(value, ((0, 0), (0, 1))) for value in dynamic)


def eos_table(vocab_size, eos_after):
    """Token 4 after bos, then eos after token 4 when `eos_after`, else token 5 forever."""
    table = np.full((vocab_size, vocab_size), -30.0, "float32")
    table[BOS, 4] = 0.0
    table[4, EOS if eos_after else 5] = 0.0
    table[5, 5] = 0.0
    table[EOS, EOS] = 0.0
    return table


@pytest.mark.usefixtures("python_loops", "first_segment_16")
@pytest.mark.parametrize("search", ["beam", "greedy"])
def test_caches_grow_only_while_a_sentence_is_still_decoding(search):
    def run(decoder):
        sources = np.array([[6, 7, EOS]], "int32")
        if search == "beam":
            return BeamSearch(beam_size=2, alpha=0.0, max_extra_length=60)(decoder, sources)
        return greedy_search(decoder, sources, max_extra_length=60)

    done_early = GrowthCountingDecoder(eos_table(8, eos_after=True), max_length=63)
    result = run(done_early)
    assert ops.convert_to_numpy(result.ids)[0, 0, :2].tolist() == [4, EOS]
    assert done_early.grown_to == []  # done within the first segment: no growth
    long_running = GrowthCountingDecoder(eos_table(8, eos_after=False), max_length=63)
    result = run(long_running)
    assert int(ops.convert_to_numpy(result.lengths)[0, 0]) == 63  # ran to the cap
    assert long_running.grown_to == [32, 63]


@pytest.mark.usefixtures("python_loops")
def test_finished_sentences_leave_the_running_batch():
    # No eos: each sentence runs to its cap, its source length + 3 (5 and 8 output tokens).
    sources = np.array([[6, EOS, PAD, PAD, PAD], [6, 7, 6, 7, EOS]], "int32")
    search = BeamSearch(beam_size=2, alpha=0.0, max_extra_length=3)
    decoder = RowCountingDecoder(eos_table(8, eos_after=False))
    result = search(decoder, sources)
    assert ops.convert_to_numpy(result.lengths)[:, 0].tolist() == [5, 8]
    # Two sentences of two beams until the first is done; then one (JAX keeps both).
    later_rows = 2 if drops_finished_sentences() else 4
    assert decoder.rows == [4] * 5 + [later_rows] * 3
    alone = search(RowCountingDecoder(eos_table(8, eos_after=False)), sources[1:])
    for batch, single in zip(result, alone):
        np.testing.assert_array_equal(ops.convert_to_numpy(batch)[1:], ops.convert_to_numpy(single))


@pytest.mark.usefixtures("python_loops")
def test_the_early_exit_waits_only_for_the_requested_hypotheses():
    table = second_hypothesis_later_table()
    sources = np.array([[6, EOS]], "int32")
    settings = {"one": 1, "one, as a tensor": ops.convert_to_tensor(1, "int32"), "two": 2}
    steps, best = {}, {}
    for name, num_hypotheses in settings.items():
        decoder = RowCountingDecoder(table)
        search = BeamSearch(2, alpha=0.0, max_extra_length=20, num_hypotheses=num_hypotheses)
        result = search(decoder, sources)
        steps[name] = len(decoder.rows)
        best[name] = (ops.convert_to_numpy(result.ids)[0, 0, :2].tolist(), result.log_probs[0, 0])
        assert ops.shape(result.ids)[1] == (2 if name == "two" else 1)
    assert steps == {"one": 2, "one, as a tensor": 2, "two": 6}
    assert best["one"][0] == best["one, as a tensor"][0] == best["two"][0] == [4, EOS]
    assert float(best["one"][1]) == pytest.approx(np.log(0.99 * 0.9), abs=1e-6)
