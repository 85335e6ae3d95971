"""Target prefixes: every hypothesis of every search starts with the forced tokens, the score
is the teacher-forced log-probability of the whole output, and no prefix changes nothing."""

import numpy as np
import pytest
from keras import ops

from keras_transformer.cli import main
from keras_transformer.data.vocabulary import SubwordVocabulary
from keras_transformer.decoding import BeamSearch, greedy_search, length_penalty, sample
from keras_transformer.decoding.incremental import NEG_INF
from keras_transformer.decoding.prefix import force_prefix
from keras_transformer.decoding.scoring import token_log_probs
from keras_transformer.errors import UserInputError
from keras_transformer.translation import Translator, translate
from tests._decoding_fixtures import (
    EOS,
    PAD,
    SENTENCES,
    full_log_probs,
    tiny_copy_run_folder,
    tiny_model,
    train_char_vocabulary,
)
from tests._export_fixtures import SETTINGS

SOURCES = np.array([[4, 5, 6, 7, EOS], [8, 9, EOS, PAD, PAD], [5, 5, 10, EOS, PAD]], "int32")
# Row 0: three forced tokens, row 1: one, row 2: none (a row of pads).
PREFIXES = np.array([[9, 10, 4, PAD], [6, PAD, PAD, PAD], [PAD, PAD, PAD, PAD]], "int32")


def prefix_of(row):
    return [int(t) for t in PREFIXES[row] if t != PAD]


@pytest.fixture(scope="module")
def model():
    return tiny_model(vocab_size=12, max_length=16, seed=3, sharpen=3.0)


def numpy_arrays(result):
    return [np.asarray(ops.convert_to_numpy(x)) for x in result]


def teacher_forced(model, source, output_ids):
    """log P(output | source), summed by `scoring.token_log_probs` (one full forward pass)."""
    log_probs = token_log_probs(model, source[None], np.asarray([output_ids], "int32"))
    return float(np.sum(ops.convert_to_numpy(log_probs)))


def test_force_prefix_against_hand_computed_values():
    log_probs = np.log(np.array([[0.1, 0.2, 0.3, 0.4]] * 3, "float32"))
    prefix_ids = np.array([[2, 1], [3, 0], [0, 0]], "int32")  # pad 0
    at_0 = np.asarray(ops.convert_to_numpy(force_prefix(log_probs, prefix_ids, 0, pad_id=0)))
    at_1 = np.asarray(ops.convert_to_numpy(force_prefix(log_probs, prefix_ids, 1, pad_id=0)))
    at_5 = np.asarray(ops.convert_to_numpy(force_prefix(log_probs, prefix_ids, 5, pad_id=0)))
    expected_0 = np.full((3, 4), NEG_INF, "float32")
    expected_0[0, 2], expected_0[1, 3] = log_probs[0, 2], log_probs[1, 3]
    expected_0[2] = log_probs[2]
    np.testing.assert_array_equal(at_0, expected_0)
    expected_1 = log_probs.copy()
    expected_1[0] = [NEG_INF, log_probs[0, 1], NEG_INF, NEG_INF]
    np.testing.assert_array_equal(at_1, expected_1)
    np.testing.assert_array_equal(at_5, log_probs)  # past every prefix
    empty = np.zeros((3, 0), "int32")
    np.testing.assert_array_equal(
        ops.convert_to_numpy(force_prefix(log_probs, empty, 0, pad_id=0)), log_probs
    )


def test_beam_candidates_forced_after_the_top_k_are_those_of_force_prefix_then_top_k():
    """Beam search applies a prefix to its 2k candidates, not to the beam x vocabulary
    log-probabilities: the same real candidates, in the same order, as `force_prefix` followed
    by a top-k over the beams' rows."""
    from types import SimpleNamespace

    from keras_transformer.decoding.beam_search import _forced_candidates
    from keras_transformer.decoding.top_k import top_k

    rng = np.random.default_rng(0)
    n, k, vocab = 4, 3, 7
    log_probs = rng.normal(size=(n, k, vocab)).astype("float32")
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    alive = rng.normal(size=(n, k)).astype("float32")
    alive[1, 1:] = NEG_INF  # one live beam, as at step 0
    # Sentence 2: beams 0 and 1 tie on the forced token (ties go to the lower beam).
    log_probs[2, 0, 5], log_probs[2, 1, 5], alive[2, :2] = -1.0, -1.0, -0.5
    # Step 1: sentences 0-2 have a prefix token there, sentence 3 a prefix that has ended.
    prefixes = np.array([[6, 4, PAD], [3, 2, PAD], [1, 5, 6], [8, PAD, PAD]], "int32")
    rows = np.repeat(prefixes, k, axis=0)
    forced = force_prefix(log_probs.reshape(n * k, vocab), rows, 1, pad_id=PAD)
    totals = alive[:, :, None] + ops.reshape(forced, (n, k, vocab))
    expected_values, expected_indices = numpy_arrays(ops.top_k(ops.reshape(totals, (n, -1)), 2 * k))
    values, indices = top_k(ops.reshape(alive[:, :, None] + log_probs, (n, -1)), 2 * k)
    values, indices = numpy_arrays(
        _forced_candidates(values, indices, log_probs, alive, rows, 1, SimpleNamespace(pad_id=PAD))
    )
    real = expected_values > NEG_INF / 2
    assert real.sum(axis=1).tolist() == [3, 1, 3, 2 * k]
    np.testing.assert_array_equal(values > NEG_INF / 2, real)
    np.testing.assert_array_equal(values[real], expected_values[real])
    np.testing.assert_array_equal(indices[real], expected_indices[real])
    assert indices[2, :2].tolist() == [5, vocab + 5]  # the tie: beam 0 first


def test_beam_n_best_start_with_the_prefix_and_score_the_whole_output(model):
    search = BeamSearch(beam_size=3, alpha=0.6, max_extra_length=6, num_hypotheses=3)
    free_ids = numpy_arrays(search(model, SOURCES))[0]
    ids, lengths, log_probs, scores = numpy_arrays(search(model, SOURCES, PREFIXES))
    for row in range(2):  # the prefix is not what the model would say anyway
        assert free_ids[row, 0, : len(prefix_of(row))].tolist() != prefix_of(row)
    for row in range(len(SOURCES)):
        prefix = prefix_of(row)
        for j in range(3):
            output = ids[row, j, : lengths[row, j]].tolist()
            assert output[: len(prefix)] == prefix
            assert output[-1] == EOS or lengths[row, j] == min(
                int(np.sum(SOURCES[row] != PAD)) + 6, 16
            )
            # The forced tokens count: the log-probability is the whole output's.
            reference = teacher_forced(model, SOURCES[row], output)
            assert log_probs[row, j] == pytest.approx(reference, abs=1e-4)
            assert scores[row, j] == pytest.approx(
                reference / length_penalty(int(lengths[row, j]), 0.6), abs=1e-4
            )
        assert len({tuple(ids[row, j]) for j in range(3)}) == 3  # three distinct hypotheses
        assert list(scores[row]) == sorted(scores[row], reverse=True)


def test_greedy_continues_the_prefix_with_the_teacher_forced_argmax(model):
    ids, lengths, log_probs, _ = numpy_arrays(
        greedy_search(model, SOURCES, max_extra_length=6, prefix_ids=PREFIXES)
    )
    for row in range(len(SOURCES)):
        prefix = prefix_of(row)
        output = ids[row, 0, : lengths[row, 0]].tolist()
        assert output[: len(prefix)] == prefix and len(output) > len(prefix)
        # NumPy reference: after the prefix, each token is the argmax of the full forward
        # pass over the output so far.
        reference = full_log_probs(model, SOURCES[row : row + 1], [[2] + output[:-1]])[0]
        for t in range(len(prefix), len(output)):
            assert output[t] == int(np.argmax(reference[t]))
        assert log_probs[row, 0] == pytest.approx(
            sum(reference[t, token] for t, token in enumerate(output)), abs=1e-4
        )


def test_sampling_starts_with_the_prefix_and_otherwise_draws_as_without(model):
    rng = np.random.default_rng(0)
    noise = rng.random((min(SOURCES.shape[1] + 6, 16), len(SOURCES))).astype("float32")
    ids, lengths, log_probs, _ = numpy_arrays(
        sample(model, SOURCES, max_extra_length=6, noise=noise, prefix_ids=PREFIXES)
    )
    free = numpy_arrays(sample(model, SOURCES, max_extra_length=6, noise=noise))
    for row in range(len(SOURCES)):
        prefix = prefix_of(row)
        output = ids[row, 0, : lengths[row, 0]].tolist()
        assert output[: len(prefix)] == prefix
        assert log_probs[row, 0] == pytest.approx(
            teacher_forced(model, SOURCES[row], output), abs=1e-4
        )
    # The row without a prefix draws exactly what it draws with no prefix at all.
    np.testing.assert_array_equal(ids[2], free[0][2])
    np.testing.assert_array_equal(log_probs[2], free[2][2])


@pytest.mark.parametrize("search", ["beam", "greedy", "sample"])
def test_a_prefix_of_pads_changes_nothing_bit_for_bit(model, search):
    noise = np.random.default_rng(1).random((11, 3)).astype("float32")
    run = {
        "beam": lambda **p: BeamSearch(3, 0.6, 6, num_hypotheses=2)(model, SOURCES, **p),
        "greedy": lambda **p: greedy_search(model, SOURCES, 6, **p),
        "sample": lambda **p: sample(model, SOURCES, max_extra_length=6, noise=noise, **p),
    }[search]
    without = numpy_arrays(run())
    for width in (0, 8):
        with_pads = numpy_arrays(run(prefix_ids=np.full((3, width), PAD, "int32")))
        for a, b in zip(without, with_pads):
            np.testing.assert_array_equal(a, b)


# -- Translator -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vocabulary_path(tmp_path_factory):
    return train_char_vocabulary(tmp_path_factory.mktemp("vocab"))


@pytest.fixture(scope="module")
def char_model(vocabulary_path):
    return tiny_model(vocab_size=SubwordVocabulary(vocabulary_path).size, max_length=48, seed=5)


TEXTS = ["the cat sat", "a dog", "", "hello", "it rains"]
TEXT_PREFIXES = ["dog s", "", "hello", "wr", ""]


@pytest.mark.parametrize(
    "settings",
    [
        dict(search="beam", beam_size=3, num_hypotheses=3),
        dict(search="greedy"),
        dict(search="sample", seed=3, top_k=5),
    ],
    ids=["beam-n-best", "greedy", "sample"],
)
def test_translations_start_with_the_prefix_text(char_model, vocabulary_path, settings):
    # Eager (compile=False) for speed: the CLI test below runs the compiled search.
    translator = Translator(
        char_model, vocabulary_path, max_extra_length=8, compile=False, **settings
    )
    outputs = translator.translate(TEXTS, target_prefix=TEXT_PREFIXES)
    free = Translator(char_model, vocabulary_path, max_extra_length=8, compile=False, **settings)
    free_outputs = free.translate(TEXTS)
    for text, prefix, output, free_output in zip(TEXTS, TEXT_PREFIXES, outputs, free_outputs):
        hypotheses = output if settings.get("num_hypotheses", 1) > 1 else [(output, None)]
        if not text:
            assert output == free_output  # nothing to translate, whatever the prefix
            continue
        for hypothesis, _ in hypotheses:
            assert hypothesis.startswith(prefix)
            if prefix:  # a random model does not say the prefix by itself
                free_first = free_output[0][0] if isinstance(free_output, list) else free_output
                assert not free_first.startswith(prefix)


def test_empty_prefixes_translate_exactly_as_without(char_model, vocabulary_path):
    translator = Translator(
        char_model, vocabulary_path, beam_size=3, num_hypotheses=2, max_extra_length=8
    )
    without = translator.translate(TEXTS)
    assert translator.translate(TEXTS, target_prefix=[""] * len(TEXTS)) == without
    assert translator.translate(TEXTS, target_prefix=None) == without
    # Sentences without a prefix in a batch with prefixes: the same n-best, the same scores.
    mixed = translator.translate(TEXTS, target_prefix=TEXT_PREFIXES)
    for prefix, output, alone in zip(TEXT_PREFIXES, mixed, without):
        if not prefix:
            assert output == alone
    # And the top-level function passes it through.
    assert translate(TEXTS[:2], translator, target_prefix=["dog", ""])[0].startswith("dog")


def test_an_ensemble_starts_with_the_prefix(vocabulary_path):
    size = SubwordVocabulary(vocabulary_path).size
    models = [tiny_model(vocab_size=size, max_length=48, seed=s) for s in (6, 7)]
    translator = Translator(models, vocabulary_path, beam_size=2, max_extra_length=6, compile=False)
    assert all(
        out.startswith("sing")
        for out in translator.translate(SENTENCES[:3], target_prefix=["sing"] * 3)
    )


def test_prefix_errors(char_model, vocabulary_path):
    translator = Translator(
        char_model, vocabulary_path, beam_size=2, max_extra_length=3, compile=False
    )
    with pytest.raises(UserInputError, match="2 texts but 1 target prefixes"):
        translator.translate(["a dog", "hello"], target_prefix=["a"])
    # Outputs are capped at the source's tokens (eos included) + max_extra_length.
    vocabulary = SubwordVocabulary(vocabulary_path)
    cap = len(vocabulary.encode("a dog")) + 1 + 3
    long_prefix = "the cat sat on the mat"
    assert len(vocabulary.encode(long_prefix)) >= cap
    with pytest.raises(UserInputError, match=rf"texts\[1\] has \d+ tokens.*capped at {cap} "):
        translator.translate(["hello", "a dog"], target_prefix=["", long_prefix])
    with pytest.raises(TypeError, match=r"texts\[0\] is int"):
        translator.translate(["a dog"], target_prefix=[3])
    with pytest.raises(TypeError, match="list of strings"):
        translator.translate(["a dog"], target_prefix="a")


# -- CLI ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    return tiny_copy_run_folder(tmp_path_factory)


def test_cli_prefix_file(run_folder, tmp_path):
    texts = ["a dog", "hello", "", "it rains"]
    prefixes = ["sing", "", "the", "bo"]
    source, prefix_file, output = tmp_path / "in.txt", tmp_path / "prefix.txt", tmp_path / "o"
    source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    prefix_file.write_text("\n".join(prefixes) + "\n", encoding="utf-8")
    argv = ["translate", "--model", str(run_folder), "-i", str(source), "-o", str(output)]
    argv += ["--max-extra-length", "5", "--chunk-size", "3", "--prefix-file", str(prefix_file)]
    assert main(argv) == 0
    lines = output.read_text(encoding="utf-8").split("\n")[:-1]
    expected = Translator.load(str(run_folder), max_extra_length=5).translate(
        texts, target_prefix=prefixes
    )
    assert lines == expected
    assert lines[0].startswith("sing") and lines[3].startswith("bo") and lines[2] == ""


def test_cli_prefix_file_with_another_line_count_is_one_error(
    run_folder, tmp_path, capsys, monkeypatch
):
    source, prefix_file, output = tmp_path / "in.txt", tmp_path / "prefix.txt", tmp_path / "o"
    source.write_text("a dog\nhello\nit rains\n", encoding="utf-8")
    prefix_file.write_text("sing\n\n", encoding="utf-8")
    output.write_text("an earlier result\n", encoding="utf-8")
    argv = ["translate", "--model", str(run_folder), "-i", str(source), "-o", str(output)]
    assert main([*argv, "--prefix-file", str(prefix_file)]) == 2
    message = capsys.readouterr().err
    assert f"--prefix-file '{prefix_file}' has 2 lines but the input '{source}' has 3" in message
    assert output.read_text(encoding="utf-8") == "an earlier result\n"
    # From stdin, the counts are compared as the lines come (both ways round).
    import io

    for data, counts in [(b"a dog\nhello\nit rains\n", "more than 2"), (b"a dog\n", "1")]:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
        assert main(["translate", "--model", str(run_folder), "-o", str(output), "--overwrite",
                     "--prefix-file", str(prefix_file)]) == 2  # fmt: skip
        assert f"has 2 lines but the input stdin has {counts};" in capsys.readouterr().err
        assert output.read_text(encoding="utf-8") == "an earlier result\n"


# -- SavedModel -----------------------------------------------------------------------------

SERVED_TEXTS = ["the cat sat", "a dog", "", "hello", "it rains"]
SERVED_PREFIXES = ["dog s", "", "hello", "wr", ""]
SERVING_DEFAULTS = dict(beam_size=2, alpha=0.6, max_extra_length=6)


@pytest.fixture(scope="module")
def exported(shared_export):
    """The shared export (tests/_export_fixtures.py), whose defaults are SERVING_DEFAULTS."""
    assert SERVING_DEFAULTS.items() <= SETTINGS.items()
    return shared_export.path, shared_export.loaded


def test_signature_translations_start_with_the_prefix_as_translate_does(exported, shared_export):
    import tensorflow as tf

    _, loaded = exported
    vocabulary_path, char_model = shared_export.vocabulary_path, shared_export.model
    signature = loaded.signatures["translate_with_prefix"]
    outputs = signature(
        text=tf.constant(SERVED_TEXTS),
        target_prefix=tf.constant(SERVED_PREFIXES),
        beam_size=tf.constant(2),
        alpha=tf.constant(0.6),
        max_extra_length=tf.constant(6),
        num_hypotheses=tf.constant(2),
        length_penalty=tf.constant("gnmt"),
    )
    served = [[t.decode() for t in row] for row in outputs["nbest_translations"].numpy()]
    translator = Translator(char_model, vocabulary_path, num_hypotheses=2, **SERVING_DEFAULTS)
    expected = translator.translate(SERVED_TEXTS, target_prefix=SERVED_PREFIXES)
    for text, prefix, row, hypotheses in zip(SERVED_TEXTS, SERVED_PREFIXES, served, expected):
        assert row == [t for t, _ in hypotheses] + [""] * (2 - len(hypotheses))
        assert all(t.startswith(prefix) for t in row) or not text
    for scores, hypotheses in zip(outputs["nbest_scores"].numpy(), expected):
        np.testing.assert_allclose(
            scores[: len(hypotheses)], [score for _, score in hypotheses], atol=1e-4
        )
    # Empty prefixes: what serving_default gives.
    plain = loaded.signatures["serving_default"](
        text=tf.constant(SERVED_TEXTS),
        beam_size=tf.constant(2),
        alpha=tf.constant(0.6),
        max_extra_length=tf.constant(6),
        num_hypotheses=tf.constant(1),
        length_penalty=tf.constant("gnmt"),
    )
    unforced = signature(
        text=tf.constant(SERVED_TEXTS),
        target_prefix=tf.constant([""] * len(SERVED_TEXTS)),
        beam_size=tf.constant(2),
        alpha=tf.constant(0.6),
        max_extra_length=tf.constant(6),
        num_hypotheses=tf.constant(1),
        length_penalty=tf.constant("gnmt"),
    )
    for key in ("translation", "score"):
        np.testing.assert_array_equal(plain[key].numpy(), unforced[key].numpy())
    # The ids signature that holds the search: output ids start with the prefix ids.
    vocabulary = SubwordVocabulary(vocabulary_path)

    def padded(rows):
        return [row + [PAD] * (max(map(len, rows)) - len(row)) for row in rows]

    source = padded([vocabulary.encode("a dog") + [EOS], vocabulary.encode("hello") + [EOS]])
    prefix = padded([vocabulary.encode("sing"), vocabulary.encode("wr")])
    found = loaded.signatures["translate_ids_with_prefix"](
        source_ids=tf.constant(source, tf.int32),
        prefix_ids=tf.constant(prefix, tf.int32),
        beam_size=tf.constant(2),
        alpha=tf.constant(0.6),
        max_extra_length=tf.constant(6),
        num_hypotheses=tf.constant(2),
        length_penalty=tf.constant("gnmt"),
    )
    for row, ids in enumerate(found["output_ids"].numpy()):
        forced = [t for t in prefix[row] if t != PAD]
        assert all(hypothesis[: len(forced)].tolist() == forced for hypothesis in ids)
    with pytest.raises(tf.errors.InvalidArgumentError, match="one target_prefix per text"):
        signature(
            text=tf.constant(["a dog", "hello"]),
            target_prefix=tf.constant(["a"]),
            beam_size=tf.constant(2),
            alpha=tf.constant(0.6),
            max_extra_length=tf.constant(6),
            num_hypotheses=tf.constant(1),
            length_penalty=tf.constant("gnmt"),
        )


def test_session_loader_fills_the_settings_and_serving_default_is_unchanged(
    exported, shared_export
):
    """As TF Serving runs a gRPC request that sends `text` and `target_prefix` only: the TF1
    session loader, the settings from the SignatureDef's defaults."""
    import tensorflow as tf

    from keras_transformer.export import check_serving_ops

    path, _ = exported
    vocabulary_path, char_model = shared_export.vocabulary_path, shared_export.model
    check_serving_ops(path)  # the prefix adds no op that TF Serving lacks
    with tf.compat.v1.Session(graph=tf.Graph()) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(path))
        signature = meta.signature_def["translate_with_prefix"]
        assert sorted(signature.defaults) == [
            "alpha",
            "beam_size",
            "length_penalty",
            "max_extra_length",
            "num_hypotheses",
        ]
        feed = {
            signature.inputs["text"].name: SERVED_TEXTS,
            signature.inputs["target_prefix"].name: SERVED_PREFIXES,
        }
        for key in signature.defaults:
            feed[signature.inputs[key].name] = tf.make_ndarray(signature.defaults[key])
        served = session.run(signature.outputs["translation"].name, feed_dict=feed)
        # serving_default takes no prefix, and every setting has a default: requests that
        # worked before work unchanged.
        default = meta.signature_def["serving_default"]
        assert sorted(default.inputs) == [
            "alpha",
            "beam_size",
            "length_penalty",
            "max_extra_length",
            "num_hypotheses",
            "text",
        ]
        assert sorted(default.defaults) == sorted(set(default.inputs) - {"text"})
    translator = Translator(char_model, vocabulary_path, **SERVING_DEFAULTS)
    expected = translator.translate(SERVED_TEXTS, target_prefix=SERVED_PREFIXES)
    assert [t.decode() for t in served] == expected
    assert expected[0].startswith("dog s") and expected[3].startswith("wr")
