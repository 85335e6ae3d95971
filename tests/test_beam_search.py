"""Beam search: exhaustive-search optimality on a tiny model, hand-computed length penalty and
early exit on scripted distributions, n-best order, and every backend (subprocess)."""

import itertools
import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from keras import ops

from keras_transformer.decoding import BeamSearch, EnsembleDecoder, greedy_search, is_hypothesis
from tests._decoding_fixtures import (
    BOS,
    EOS,
    PAD,
    UNK,
    MarkovDecoder,
    full_log_probs,
    markov_table,
    power_prefers_longer_table,
    sequence_log_prob,
    tiny_model,
)

ALPHA = 0.6


def lp(length, alpha=ALPHA):
    return ((5 + length) / 6) ** alpha


def hypotheses(result, sentence):
    ids = ops.convert_to_numpy(result.ids)[sentence]
    lengths = ops.convert_to_numpy(result.lengths)[sentence]
    scores = ops.convert_to_numpy(result.scores)[sentence]
    log_probs = ops.convert_to_numpy(result.log_probs)[sentence]
    return [
        (ids[i, : lengths[i]].tolist(), float(log_probs[i]), float(scores[i]))
        for i in range(len(scores))
        if is_hypothesis(scores[i])
    ]


def enumerate_scores(model, source, cap, alpha=ALPHA):
    """Every output a search may return, scored by full forward passes (NumPy side): each
    sequence of output tokens (pad and bos are never outputs) that ends with eos within the
    cap, and each sequence that reaches the cap without eos (truncated)."""
    outputs = [t for t in range(model.config.vocab_size) if t not in (PAD, BOS, EOS)]
    sequences = [
        list(prefix) + [EOS]
        for length in range(cap)
        for prefix in itertools.product(outputs, repeat=length)
    ]
    sequences += [list(s) for s in itertools.product(outputs, repeat=cap)]
    by_length = {}
    for sequence in sequences:
        by_length.setdefault(len(sequence), []).append(sequence)
    scored = []
    for length, group in by_length.items():
        inputs = np.array([[BOS] + s[:-1] for s in group], "int32")
        log_probs = full_log_probs(model, np.repeat(source[None], len(group), 0), inputs)
        for row, sequence in enumerate(group):
            total = sum(log_probs[row, t, token] for t, token in enumerate(sequence))
            scored.append((total / lp(length, alpha), sequence))
    return sorted(scored, key=lambda item: -item[0])


def test_wide_beam_finds_the_exhaustive_best_and_beam_four_never_beats_it():
    # 4 real output tokens (unk, 4, 5, 6) + eos; caps 3 and 2 (source length + 1).
    model = tiny_model(vocab_size=7, max_length=8, seed=5, sharpen=2.5)
    sources = np.array([[5, EOS], [EOS, PAD]], "int32")
    caps = [3, 2]
    wide = BeamSearch(beam_size=32, alpha=ALPHA, max_extra_length=1, num_hypotheses=5)(
        model, sources
    )
    narrow = BeamSearch(beam_size=4, alpha=ALPHA, max_extra_length=1)(model, sources)
    for sentence, (source, cap) in enumerate(zip(sources, caps)):
        exhaustive = enumerate_scores(model, source, cap)
        found = hypotheses(wide, sentence)
        # The five best, in order, with their scores.
        np.testing.assert_allclose(
            [score for _, _, score in found], [score for score, _ in exhaustive[:5]], atol=1e-4
        )
        best_ids, best_log_prob, best_score = found[0]
        assert abs(best_score - exhaustive[0][0]) < 1e-4
        assert abs(best_log_prob - sequence_log_prob(model, source, best_ids)) < 1e-4
        assert abs(best_score - best_log_prob / lp(len(best_ids))) < 1e-5
        narrow_ids, narrow_log_prob, narrow_score = hypotheses(narrow, sentence)[0]
        assert narrow_score <= exhaustive[0][0] + 1e-5
        assert abs(narrow_log_prob - sequence_log_prob(model, source, narrow_ids)) < 1e-4


def test_n_best_is_sorted_and_each_score_is_its_log_prob_over_the_penalty():
    model = tiny_model(vocab_size=11, max_length=16, seed=6, sharpen=2.0)
    sources = np.array([[5, 6, 7, EOS], [8, EOS, PAD, PAD]], "int32")
    result = BeamSearch(beam_size=4, alpha=ALPHA, max_extra_length=3, num_hypotheses=4)(
        model, sources
    )
    for sentence, source in enumerate(sources):
        found = hypotheses(result, sentence)
        assert len(found) == 4
        scores = [score for _, _, score in found]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(ids) for ids, _, _ in found}) == 4
        for ids, log_prob, score in found:
            assert abs(score - log_prob / lp(len(ids))) < 1e-5
            assert abs(log_prob - sequence_log_prob(model, source, ids)) < 1e-4
            assert not set(ids) & {PAD, BOS} and EOS not in ids[:-1]


# Scripted distributions: 0 pad, 1 unk, 2 bos, 3 eos, 4 = x, 5 = y.
X, Y = 4, 5
SOURCE = np.array([[X, X, X, X, EOS]], "int32")  # cap = 5 + 5 = 10


@pytest.mark.usefixtures("python_loops")
def test_early_exit_when_no_alive_hypothesis_can_beat_the_finished_one():
    # Step 1: eos (0.6) finishes with score ln 0.6 / lp(1) = -0.5108. The best alive, x (0.3),
    # can at most reach ln 0.3 / lp(10) = -1.2040 / 1.7329 = -0.6948 < -0.5108: stop.
    table = markov_table(6, {BOS: {EOS: 0.6, X: 0.3, Y: 0.1, UNK: 0.0}})
    decoder = MarkovDecoder(table)
    result = BeamSearch(beam_size=2, alpha=ALPHA, max_extra_length=5)(decoder, SOURCE)
    assert math.log(0.3) / lp(10) < math.log(0.6) / lp(1)
    assert decoder.steps == 1
    ids, log_prob, score = hypotheses(result, 0)[0]
    assert ids == [EOS]
    assert abs(score - math.log(0.6)) < 1e-6


@pytest.mark.usefixtures("python_loops")
def test_no_early_exit_while_the_bound_can_beat_the_finished_one():
    # Step 1: eos (0.45) finishes with -0.7985; x (0.5) is alive with bound
    # ln 0.5 / lp(10) = -0.4000 > -0.7985: go on. Step 2: x eos has log-prob
    # ln 0.5 + ln 0.85 = -0.8557, score -0.8557 / lp(2) = -0.8557 / 1.0969 = -0.7801, which beats
    # -0.7985 (the length penalty at work: with alpha = 0 the short one wins). The best alive
    # now has log-prob ln 0.5 + ln 0.05 = -3.689, bound -2.129: stop after 2 steps.
    rows = {
        BOS: {X: 0.5, EOS: 0.45, UNK: 0.025, Y: 0.025},
        X: {EOS: 0.85, UNK: 0.05, X: 0.05, Y: 0.05},
    }
    expected = {ALPHA: ([X, EOS], math.log(0.5) + math.log(0.85)), 0.0: ([EOS], math.log(0.45))}
    for alpha, (expected_ids, expected_log_prob) in expected.items():
        decoder = MarkovDecoder(markov_table(6, rows))
        result = BeamSearch(beam_size=2, alpha=alpha, max_extra_length=5)(decoder, SOURCE)
        ids, log_prob, score = hypotheses(result, 0)[0]
        assert ids == expected_ids, alpha
        assert abs(log_prob - expected_log_prob) < 1e-5
        assert abs(score - expected_log_prob / lp(len(expected_ids), alpha)) < 1e-5
        assert decoder.steps == 2
    assert abs(expected[ALPHA][1] / lp(2) - (-0.7801)) < 1e-4


@pytest.mark.usefixtures("python_loops")
def test_early_exit_bound_divides_by_the_penalty_at_the_cap():
    # Step 1: eos (0.5) finishes with ln 0.5 = -0.6931. x (0.45) is alive with log-prob
    # -0.7985, below it, but x may grow to the cap of 10 tokens: bound -0.7985 / lp(10) =
    # -0.4608 > -0.6931, so the search goes on, and x x ... x (x -> x 0.97, truncated at 10)
    # scores (ln 0.45 + 9 ln 0.97) / lp(10) = -1.0726 / 1.7329 = -0.6190 > -0.6931.
    # With alpha = 0 the bound is -0.7985 < -0.6931: stop after one step with eos.
    rows = {
        BOS: {EOS: 0.5, X: 0.45, UNK: 0.025, Y: 0.025},
        X: {X: 0.97, EOS: 0.01, UNK: 0.01, Y: 0.01},
    }
    long_log_prob = math.log(0.45) + 9 * math.log(0.97)
    assert long_log_prob / lp(10) > math.log(0.5)
    for alpha, expected_ids, expected_steps in ((ALPHA, [X] * 10, 10), (0.0, [EOS], 1)):
        decoder = MarkovDecoder(markov_table(6, rows))
        result = BeamSearch(beam_size=2, alpha=alpha, max_extra_length=5)(decoder, SOURCE)
        ids, log_prob, score = hypotheses(result, 0)[0]
        assert ids == expected_ids, alpha
        assert decoder.steps == expected_steps, alpha
    assert abs(score - math.log(0.5)) < 1e-6


@pytest.mark.usefixtures("python_loops")
def test_hypotheses_that_reach_the_cap_finish_without_eos():
    # eos is never likely: every hypothesis runs to the cap of source length (2) + 1 = 3.
    table = markov_table(6, {t: {X: 0.9, EOS: 0.001} for t in range(6)})
    decoder = MarkovDecoder(table)
    result = BeamSearch(beam_size=2, alpha=ALPHA, max_extra_length=1, num_hypotheses=2)(
        decoder, np.array([[X, EOS]], "int32")
    )
    (ids, log_prob, _), _ = hypotheses(result, 0)
    assert ids == [X, X, X]
    assert abs(log_prob - 3 * math.log(0.9)) < 1e-5
    assert decoder.steps == 3


def test_ensemble_of_one_model_twice_equals_the_model():
    model = tiny_model(vocab_size=11, max_length=16, seed=7, sharpen=2.0)
    sources = np.array([[5, 6, EOS], [8, EOS, PAD]], "int32")
    search = BeamSearch(beam_size=3, alpha=ALPHA, max_extra_length=3)
    single = search(model, sources)
    for combine in ("log_probs", "probs"):
        double = search(EnsembleDecoder([model, model], combine=combine), sources)
        for sentence in range(2):
            (a_ids, a_lp, _), (b_ids, b_lp, _) = (
                hypotheses(single, sentence)[0],
                hypotheses(double, sentence)[0],
            )
            assert a_ids == b_ids and abs(a_lp - b_lp) < 1e-4


def test_ensemble_averages_log_probs_of_its_members():
    a = markov_table(6, {BOS: {X: 0.7, EOS: 0.1, Y: 0.1, UNK: 0.1}})
    b = markov_table(6, {BOS: {X: 0.1, EOS: 0.1, Y: 0.7, UNK: 0.1}})
    ensemble = EnsembleDecoder([MarkovDecoder(a), MarkovDecoder(b)])
    static, dynamic = ensemble.initial_state(np.zeros((1, 2), "int32"), 4)
    log_probs, _ = ensemble.step(np.array([[BOS]], "int32"), static, dynamic, 0)
    log_probs = ops.convert_to_numpy(log_probs)[0]
    assert abs(log_probs[X] - (math.log(0.7) + math.log(0.1)) / 2) < 1e-6
    probs = EnsembleDecoder([MarkovDecoder(a), MarkovDecoder(b)], combine="probs")
    log_probs, _ = probs.step(np.array([[BOS]], "int32"), static, dynamic, 0)
    assert abs(ops.convert_to_numpy(log_probs)[0, X] - math.log(0.4)) < 1e-6


@pytest.mark.usefixtures("python_loops")
def test_power_penalty_ranks_by_log_prob_over_length_to_the_alpha():
    # The table's two outputs, by hand: "4 eos" log P = ln 0.55 + ln 0.99 = -0.6079,
    # |Y| 2; "6 7 eos" log P = ln 0.45 + 2 ln 0.999 = -0.8005, |Y| 3 (eos counted, bos not).
    short = ([4, EOS], math.log(0.55) + math.log(0.99))
    long = ([6, 7, EOS], math.log(0.45) + 2 * math.log(0.999))
    cases = {
        ("power", 1.0): [(long, 3.0), (short, 2.0)],  # -0.2668 > -0.3040
        ("gnmt", 1.0): [(short, 7 / 6), (long, 8 / 6)],  # -0.5211 > -0.6004
        ("power", 0.0): [(short, 1.0), (long, 1.0)],  # raw log P
        ("power", 0.5): [(short, 2**0.5), (long, 3**0.5)],  # -0.4299 > -0.4622
    }
    for (form, alpha), expected in cases.items():
        search = BeamSearch(
            beam_size=2, alpha=alpha, max_extra_length=5, num_hypotheses=2, length_penalty=form
        )
        found = hypotheses(search(MarkovDecoder(power_prefers_longer_table()), SOURCE), 0)
        assert [ids for ids, _, _ in found] == [ids for (ids, _), _ in expected], (form, alpha)
        for (_, log_prob, score), ((_, expected_log_prob), penalty) in zip(found, expected):
            assert abs(log_prob - expected_log_prob) < 1e-5
            assert abs(score - expected_log_prob / penalty) < 1e-5


@pytest.mark.usefixtures("python_loops")
def test_power_penalty_early_exit_bounds_at_the_cap_not_at_the_current_length():
    # After step 1, "4 eos" is final (-0.6079 / 2 = -0.3040) and "6 7" alive at -0.8005:
    # bounded at its current length, -0.8005 / 2 = -0.4003, it could not win, but it grows
    # to "6 7 eos" (-0.2668). The bound at the cap (10), -0.8005 / 10, keeps it going.
    decoder = MarkovDecoder(power_prefers_longer_table())
    search = BeamSearch(beam_size=2, alpha=1.0, max_extra_length=5, length_penalty="power")
    ids, _, score = hypotheses(search(decoder, SOURCE), 0)[0]
    assert ids == [6, 7, EOS] and abs(score - (math.log(0.45) + 2 * math.log(0.999)) / 3) < 1e-5
    assert decoder.steps == 3  # then the bound, about -0.9 / 10, is below -0.2668: done


def test_invalid_settings_are_rejected():
    with pytest.raises(ValueError, match="length_penalty.*'linear'"):
        BeamSearch(length_penalty="linear")
    for kwargs in (
        {"beam_size": 0},
        {"num_hypotheses": 5},
        {"alpha": -1.0},
        {"max_extra_length": -1},
    ):
        with pytest.raises(ValueError):
            BeamSearch(**{"beam_size": 4, **kwargs})


BACKEND_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import keras
    from keras_transformer import TransformerConfig, build_model
    from keras_transformer.decoding import BeamSearch, greedy_search
    config = TransformerConfig(**json.loads(sys.argv[1]))
    model = build_model(config)
    model.load_weights(sys.argv[2])
    sources = np.array(json.loads(sys.argv[3]), "int32")
    out = {}
    searches = {"greedy": greedy_search,
                "beam": BeamSearch(beam_size=3, alpha=0.6, max_extra_length=4)}
    for name, search in searches.items():
        run = lambda s, search=search: tuple(search(model, s))
        if keras.backend.backend() == "jax":
            import jax
            run = jax.jit(run)  # the whole search compiles, loop included
        out[name] = [np.asarray(keras.ops.convert_to_numpy(x)).tolist() for x in run(sources)]
    print("RESULT " + json.dumps(out))
""")


@pytest.mark.parametrize("backend", ["jax", "numpy"])
def test_searches_agree_across_backends(backend, tmp_path):
    pytest.importorskip("jax")
    model = tiny_model(vocab_size=11, max_length=16, seed=8, sharpen=2.0)
    weights = str(tmp_path / "tiny.weights.h5")
    model.save_weights(weights)
    sources = [[5, 6, 7, EOS], [8, EOS, PAD, PAD]]
    env = {**os.environ, "KERAS_BACKEND": backend}
    process = subprocess.run(
        [
            sys.executable,
            "-c",
            BACKEND_SCRIPT,
            model.config.to_json(),
            weights,
            json.dumps(sources),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    line = next(x for x in process.stdout.splitlines() if x.startswith("RESULT "))
    other = json.loads(line[len("RESULT ") :])
    sources = np.array(sources, "int32")
    here = {"greedy": greedy_search, "beam": BeamSearch(beam_size=3, alpha=0.6, max_extra_length=4)}
    for name, search in here.items():
        ids, lengths, log_probs, scores = (ops.convert_to_numpy(x) for x in search(model, sources))
        o_ids, o_lengths, o_log_probs, o_scores = (np.array(x) for x in other[name])
        assert o_ids.tolist() == ids.tolist(), name
        assert o_lengths.tolist() == lengths.tolist(), name
        np.testing.assert_allclose(o_log_probs, log_probs, atol=1e-4)
        np.testing.assert_allclose(o_scores, scores, atol=1e-4)


def test_min_length_forbids_eos_until_reached():
    # eos is the most likely token everywhere; min_length 3 makes outputs 3 tokens long.
    table = markov_table(6, {t: {EOS: 0.9, X: 0.05, Y: 0.04} for t in range(6)})
    result = BeamSearch(beam_size=2, alpha=ALPHA, max_extra_length=5, min_length=3)(
        MarkovDecoder(table), SOURCE
    )
    ids, log_prob, _ = hypotheses(result, 0)[0]
    assert ids == [X, X, EOS]
    assert abs(log_prob - (2 * math.log(0.05) + math.log(0.9))) < 1e-5
    greedy = greedy_search(MarkovDecoder(table), SOURCE, min_length=3)
    assert ops.convert_to_numpy(greedy.ids)[0, 0, :3].tolist() == [X, X, EOS]
