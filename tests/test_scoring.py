"""Scoring given translations (`Translator.score`, `decoding.scoring`): against the
teacher-forced log-probabilities computed with NumPy from the model's logits, and against
the log-probability a search reports for its own output."""

import numpy as np
import pytest
from keras import ops

from keras_transformer.decoding import EnsembleDecoder, greedy_search
from keras_transformer.decoding.scoring import score_targets, token_log_probs
from keras_transformer.errors import UserInputError
from keras_transformer.translation import Translator, target_lines
from tests._decoding_fixtures import BOS, EOS, PAD, tiny_model

VOCAB_SIZE = 11


class LetterVocabulary:
    """One id per letter (a -> 4, b -> 5, ... modulo 7); spaces dropped."""

    size = VOCAB_SIZE

    def encode(self, text):
        return [4 + (ord(c) - ord("a")) % 7 for c in text if c != " "]

    def decode(self, ids):
        return "".join(chr(ord("a") + i - 4) for i in ids)


def numpy_scores(model, source_ids, labels):
    """Sum of log_softmax(logits)[t, label t] over non-pad labels, by hand in float64 from
    the model's functional forward pass (decoder input: bos, then the labels shifted)."""
    labels = np.asarray(labels, "int32")
    inputs = np.concatenate([np.full((len(labels), 1), BOS, "int32"), labels[:, :-1]], axis=1)
    logits = model({"source_ids": np.asarray(source_ids, "int32"), "target_ids": inputs})
    logits = np.asarray(ops.convert_to_numpy(logits), np.float64)
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, labels[:, :, None], 2)[:, :, 0]
    return (picked * (labels != PAD)).sum(-1), (labels != PAD).sum(-1)


SOURCES = np.array([[4, 5, 6, EOS, PAD], [7, EOS, PAD, PAD, PAD], [8, 9, 10, 4, EOS]], "int32")
LABELS = np.array(
    [[5, 4, EOS, PAD, PAD, PAD], [6, 7, 8, 9, 10, EOS], [EOS, PAD, PAD, PAD, PAD, PAD]]
)


def test_scores_equal_numpy_log_softmax_of_the_logits():
    model = tiny_model(VOCAB_SIZE, sharpen=3.0)
    total, count = score_targets(model, SOURCES, LABELS)
    expected_total, expected_count = numpy_scores(model, SOURCES, LABELS)
    np.testing.assert_allclose(ops.convert_to_numpy(total), expected_total, rtol=1e-5)
    np.testing.assert_array_equal(ops.convert_to_numpy(count), expected_count)
    # Every position contributes (none is 0 by accident), and padding contributes nothing.
    per_token = ops.convert_to_numpy(token_log_probs(model, SOURCES, LABELS))
    assert (per_token[LABELS != PAD] < 0).all() and (per_token[LABELS == PAD] == 0).all()


def test_score_of_a_search_output_is_the_log_prob_the_search_reports():
    model = tiny_model(VOCAB_SIZE, sharpen=3.0)
    result = greedy_search(model, SOURCES, max_extra_length=3)
    ids = ops.convert_to_numpy(result.ids)[:, 0]
    lengths = ops.convert_to_numpy(result.lengths)[:, 0]
    labels = np.where(np.arange(ids.shape[1]) < lengths[:, None], ids, PAD)
    total, _ = score_targets(model, SOURCES, labels)
    reported = ops.convert_to_numpy(result.log_probs)[:, 0]
    np.testing.assert_allclose(ops.convert_to_numpy(total), reported, rtol=1e-4, atol=1e-4)


def test_translator_score_batched_in_input_order_and_normalized():
    model = tiny_model(VOCAB_SIZE, sharpen=3.0)
    vocabulary = LetterVocabulary()
    sources = ["abc", "d", "efga bcd", "", "gg"]
    targets = ["ba", "cdefg", "", "abc", "fedcba"]
    translator = Translator(model, vocabulary, batch_size=2)
    scores = translator.score(sources, targets)
    for source, target, score in zip(sources, targets, scores):
        source_ids = [vocabulary.encode(source) + [EOS]]
        labels = [vocabulary.encode(target) + [EOS]]
        expected, count = numpy_scores(model, source_ids, labels)
        assert score == pytest.approx(expected[0], rel=1e-5)
        normalized = translator.score(source, target, normalize=True)
        assert normalized == pytest.approx(expected[0] / count[0], rel=1e-5)
    assert translator.score(sources[::-1], targets[::-1]) == pytest.approx(scores[::-1], rel=1e-5)


def test_ensemble_scores_combine_the_members_scores():
    models = [tiny_model(VOCAB_SIZE, seed=1), tiny_model(VOCAB_SIZE, seed=2)]
    members = [numpy_scores(model, SOURCES, LABELS)[0] for model in models]
    mean_log_prob, _ = score_targets(EnsembleDecoder(models), SOURCES, LABELS)
    np.testing.assert_allclose(ops.convert_to_numpy(mean_log_prob), np.mean(members, 0), rtol=1e-5)
    # "probs" combines per token (log of the mean probability), so compare token by token.
    per_model = [ops.convert_to_numpy(token_log_probs(model, SOURCES, LABELS)) for model in models]
    expected = np.log(np.mean(np.exp(per_model), axis=0)) * (LABELS != PAD)
    combined = token_log_probs(EnsembleDecoder(models, combine="probs"), SOURCES, LABELS)
    np.testing.assert_allclose(ops.convert_to_numpy(combined), expected, rtol=1e-5, atol=1e-6)


def test_score_errors_name_the_input():
    translator = Translator(tiny_model(VOCAB_SIZE, max_length=8), LetterVocabulary())
    with pytest.raises(UserInputError, match="2 sources but 1 targets"):
        translator.score(["ab", "c"], ["d"])
    with pytest.raises(UserInputError, match=r"targets\[1\] has 10 tokens .* maximum of 8"):
        translator.score(["ab", "c"], ["d", "abcdefgab"])
    with target_lines("'ref.txt'", 7), pytest.raises(UserInputError, match="line 8 of 'ref.txt'"):
        translator.score(["ab", "c"], ["d", "abcdefgab"])
    with pytest.raises(TypeError, match=r"targets\[0\] is int"):
        translator.score(["ab"], [3])


def test_saved_model_score_pairs_equals_translator_score(shared_export):
    import tensorflow as tf

    from tests._decoding_fixtures import SENTENCES

    model, vocabulary = shared_export.model, shared_export.vocabulary_path
    score_pairs = shared_export.loaded.signatures["score_pairs"]
    sources = SENTENCES[:6] + [""]
    targets = SENTENCES[3:9] + ["a dog"]
    served = score_pairs(source=tf.constant(sources), target=tf.constant(targets))["score"]
    assert served.dtype == tf.float32
    expected = Translator(model, vocabulary).score(sources, targets)
    np.testing.assert_allclose(served.numpy(), expected, rtol=1e-5)
    empty = score_pairs(source=tf.constant([], tf.string), target=tf.constant([], tf.string))
    assert empty["score"].shape == (0,)
    with pytest.raises(tf.errors.InvalidArgumentError, match="one target per source"):
        score_pairs(source=tf.constant(["a", "b"]), target=tf.constant(["a"]))
    # 49 letters and the word-start piece, and eos: 51 tokens.
    with pytest.raises(tf.errors.InvalidArgumentError, match="a target has 51 tokens .* of 48"):
        score_pairs(source=tf.constant(["a"]), target=tf.constant(["a" * 49]))
    with pytest.raises(UserInputError, match=r"targets\[0\] has 51 tokens .* of 48"):
        Translator(model, vocabulary).score(["a"], ["a" * 49])
