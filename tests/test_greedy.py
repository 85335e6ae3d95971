"""Greedy search against an independent NumPy greedy loop over full forward passes."""

import numpy as np
from keras import ops

from keras_transformer.decoding import BeamSearch, greedy_search, length_penalty
from tests._decoding_fixtures import BOS, EOS, PAD, full_log_probs, tiny_model

SOURCES = np.array([[5, 6, 7, 8, 9, EOS], [4, EOS, 0, 0, 0, 0], [10, 9, 8, EOS, 0, 0]], "int32")


def numpy_greedy(model, source_ids, max_extra_length):
    """Greedy decoding by full recomputation of every prefix, one sentence at a time."""
    outputs = []
    for source in source_ids:
        cap = min(int((source != PAD).sum()) + max_extra_length, model.config.max_length)
        tokens, log_prob = [], 0.0
        while len(tokens) < cap:
            log_probs = full_log_probs(model, source[None], np.array([[BOS] + tokens]))
            token = int(np.argmax(log_probs[0, -1]))
            tokens.append(token)
            log_prob += log_probs[0, -1, token]
            if token == EOS:
                break
        outputs.append((tokens, log_prob))
    return outputs


def unpack(result, sentence, rank=0):
    length = int(ops.convert_to_numpy(result.lengths)[sentence, rank])
    ids = ops.convert_to_numpy(result.ids)[sentence, rank]
    return (
        ids[:length].tolist(),
        float(ops.convert_to_numpy(result.log_probs)[sentence, rank]),
        float(ops.convert_to_numpy(result.scores)[sentence, rank]),
    )


def test_greedy_matches_full_recomputation_loop():
    model = tiny_model(vocab_size=11, max_length=16, seed=1, sharpen=3.0)
    result = greedy_search(model, SOURCES, max_extra_length=4)
    expected = numpy_greedy(model, SOURCES, max_extra_length=4)
    for sentence, (tokens, log_prob) in enumerate(expected):
        ids, got_log_prob, _ = unpack(result, sentence)
        assert ids == tokens
        assert abs(got_log_prob - log_prob) < 1e-4
        # Past the hypothesis everything is padding.
        assert (ops.convert_to_numpy(result.ids)[sentence, 0, len(tokens) :] == PAD).all()


def test_greedy_respects_per_sentence_caps():
    model = tiny_model(vocab_size=11, max_length=16, seed=2)
    result = greedy_search(model, SOURCES, max_extra_length=2)
    caps = [6 + 2, 2 + 2, 4 + 2]
    lengths = ops.convert_to_numpy(result.lengths)[:, 0]
    assert all(length <= cap for length, cap in zip(lengths, caps))
    ids = ops.convert_to_numpy(result.ids)[:, 0]
    for sentence, length in enumerate(lengths):
        # A hypothesis shorter than its cap ends with eos; none contains pad or bos.
        assert ids[sentence, length - 1] == EOS or length == caps[sentence]
        assert not set(ids[sentence, :length].tolist()) & {PAD, BOS}


def test_beam_size_one_equals_greedy():
    for seed in range(2):
        model = tiny_model(vocab_size=11, max_length=16, seed=seed, sharpen=2.0)
        greedy = greedy_search(model, SOURCES, max_extra_length=5)
        beam = BeamSearch(beam_size=1, alpha=0.0, max_extra_length=5)(model, SOURCES)
        for sentence in range(len(SOURCES)):
            g_ids, g_log_prob, _ = unpack(greedy, sentence)
            b_ids, b_log_prob, _ = unpack(beam, sentence)
            assert b_ids == g_ids
            assert abs(b_log_prob - g_log_prob) < 1e-5


def test_beam_size_one_with_length_penalty_scores_at_least_greedy():
    # With alpha > 0 a beam of one may keep searching after greedy's hypothesis finished
    # (the bound s / lp(cap) can beat it), but it keeps that hypothesis among the finished.
    model = tiny_model(vocab_size=11, max_length=16, seed=4, sharpen=2.0)
    greedy = greedy_search(model, SOURCES, max_extra_length=5, alpha=0.6)
    beam = BeamSearch(beam_size=1, alpha=0.6, max_extra_length=5)(model, SOURCES)
    for sentence in range(len(SOURCES)):
        g_ids, g_log_prob, g_score = unpack(greedy, sentence)
        assert abs(g_score - g_log_prob / length_penalty(len(g_ids), 0.6)) < 1e-5
        assert unpack(beam, sentence)[2] >= g_score - 1e-5


def test_beam_size_one_only_finishes_what_its_beam_holds():
    # bos -> x 0.5, eos 0.4: greedy (and a beam of one) goes on with x, then x -> eos 0.7:
    # x eos has probability 0.35. The runner-up eos of step 1 (0.4) was never in the beam and
    # must not be returned, although it scores higher.
    from tests._decoding_fixtures import UNK, MarkovDecoder, markov_table

    x = 4
    table = markov_table(
        6, {BOS: {x: 0.5, EOS: 0.4, UNK: 0.05, 5: 0.05}, x: {EOS: 0.7, UNK: 0.1, x: 0.1, 5: 0.1}}
    )
    sources = np.array([[x, x, EOS]], "int32")
    greedy = greedy_search(MarkovDecoder(table), sources)
    beam = BeamSearch(beam_size=1, alpha=0.0)(MarkovDecoder(table), sources)
    assert unpack(greedy, 0)[0] == unpack(beam, 0)[0] == [x, EOS]
    assert abs(unpack(beam, 0)[1] - np.log(0.35)) < 1e-6
