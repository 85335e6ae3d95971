"""Translator / translate(): input order, batching, loading, and bad input."""

import random
import warnings

import numpy as np
import pytest
from keras import ops

from keras_transformer.data.vocabulary import SubwordVocabulary
from keras_transformer.decoding.batches import sequence_lengths
from keras_transformer.errors import UserInputError
from keras_transformer.runs.models import atomic_save_model
from keras_transformer.translation import (
    Translator,
    compile_search,
    find_model_files,
    translate,
)
from tests._decoding_fixtures import (
    EOS,
    PAD,
    SENTENCES,
    tiny_model,
    train_char_vocabulary,
)


@pytest.fixture(scope="module")
def vocabulary_path(tmp_path_factory):
    return train_char_vocabulary(tmp_path_factory.mktemp("vocab"))


class CopyDecoder:
    """Emits the source tokens in order, then eos: a translation is its input."""

    def __init__(self, vocab_size, max_length=64):
        self.vocab_size, self.max_length = vocab_size, max_length
        self.pad_id, self.bos_id, self.eos_id = PAD, 2, EOS
        self.variables = []

    def initial_state(self, source_ids, max_length):
        return ops.convert_to_tensor(source_ids), (ops.zeros((ops.shape(source_ids)[0], 1)),)

    def step(self, token_ids, source_ids, dynamic, step):
        width = ops.shape(source_ids)[1]
        column = ops.minimum(step, width - 1)
        target = ops.take(source_ids, column, axis=1)
        target = ops.where(ops.logical_or(step >= width, target == PAD), EOS, target)
        hit = ops.arange(self.vocab_size)[None, :] == target[:, None]
        return ops.where(hit, 0.0, -20.0), dynamic


def test_output_order_equals_input_order_for_shuffled_lengths(vocabulary_path):
    vocabulary = SubwordVocabulary(vocabulary_path)
    texts = list(SENTENCES)
    random.Random(0).shuffle(texts)
    translator = Translator(CopyDecoder(vocabulary.size), vocabulary_path, batch_size=3)
    assert translator.translate(texts) == texts
    # Batches really are grouped by length: every batch is a run of the length-sorted order.
    batches = translator.batches.groups(sequence_lengths(translator._encode(texts)))
    lengths = [len(vocabulary.encode(texts[i])) for batch in batches for i in batch]
    assert lengths == sorted(lengths, reverse=True) and len(batches) == 3


def test_batched_translation_equals_one_sentence_at_a_time(vocabulary_path):
    vocabulary = SubwordVocabulary(vocabulary_path)
    model = tiny_model(vocab_size=vocabulary.size, max_length=48, seed=11, sharpen=2.0)
    texts = SENTENCES[:5]
    batched = Translator(
        model, vocabulary_path, beam_size=2, max_extra_length=5, batch_size=8, num_hypotheses=2
    )
    # Eager, one sentence at a time: the reference the compiled batches must reproduce.
    alone = Translator(
        model,
        vocabulary_path,
        beam_size=2,
        max_extra_length=5,
        batch_size=1,
        num_hypotheses=2,
        compile=False,
    )
    together = batched.translate(texts)
    for text, hypotheses in zip(texts, together):
        (first, first_score), (second, second_score) = hypotheses
        assert first_score >= second_score
        [(text_alone, score_alone), _] = alone.translate([text])[0]
        assert text_alone == first and abs(score_alone - first_score) < 1e-4


def test_xla_searches_one_sentence_batches_as_the_graph_does(vocabulary_path):
    model = tiny_model(vocab_size=SubwordVocabulary(vocabulary_path).size, max_length=48, seed=11)
    settings = dict(beam_size=2, max_extra_length=5, num_hypotheses=2)
    texts = SENTENCES[:3]
    graph = Translator(model, vocabulary_path, batch_size=8, **settings).translate(texts)
    xla = Translator(model, vocabulary_path, batch_size=1, jit_compile=True, **settings)
    for (text, score), (expected, expected_score) in zip(
        [hypothesis for hypotheses in xla.translate(texts) for hypothesis in hypotheses],
        [hypothesis for hypotheses in graph for hypothesis in hypotheses],
    ):
        assert text == expected and score == pytest.approx(expected_score, abs=1e-4)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"jit_compile": "no"}, "jit_compile must be True or False, got 'no'"),
        (
            {"jit_compile": True, "compile": False},
            "jit_compile=True compiles the search with XLA, compile=False runs it eagerly",
        ),
    ],
)
def test_jit_compile_takes_a_bool_and_a_compiled_search(vocabulary_path, options, message):
    vocab_size = SubwordVocabulary(vocabulary_path).size
    with pytest.raises(ValueError, match=message):
        Translator(CopyDecoder(vocab_size), vocabulary_path, **options)


def test_jit_single_sends_only_one_sentence_batches_to_xla():
    import tensorflow as tf

    def search_fn(source_ids):
        # A string op: TensorFlow's graph runs it, XLA cannot compile it.
        return (tf.strings.length(tf.strings.as_string(source_ids)),)

    run = compile_search(search_fn, None, jit_single=True)
    assert run(np.zeros((2, 3), "int32"))[0].shape == (2, 3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="AsString"):
        run(np.zeros((1, 3), "int32"))


def test_bad_input(vocabulary_path):
    vocabulary = SubwordVocabulary(vocabulary_path)
    translator = Translator(CopyDecoder(vocabulary.size, max_length=10), vocabulary_path)
    assert translator.translate(["", "   ", "a dog", "\t\n"]) == ["", "", "a dog", ""]
    assert translator.translate("hello") == "hello"
    with pytest.raises(TypeError, match=r"texts\[1\] is int"):
        translator.translate(["a dog", 7])
    with pytest.raises(TypeError, match=r"texts\[0\] is NoneType"):
        translator.translate([None])
    with pytest.raises(TypeError, match="list of strings"):
        translator.translate(None)
    long_text = "the cat sat on the mat"  # 22 characters > 9 + eos
    with pytest.warns(UserWarning, match=r"texts\[0\] has 2\d tokens .* maximum of 10"):
        truncated = translator.translate([long_text])[0]
    assert truncated == vocabulary.decode(vocabulary.encode(long_text)[:9])
    strict = Translator(
        CopyDecoder(vocabulary.size, max_length=10), vocabulary_path, on_too_long="error"
    )
    with pytest.raises(UserInputError, match="texts\\[1\\]"):
        strict.translate(["a dog", long_text])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert strict.translate(["green"]) == ["green"]


def test_n_best_of_empty_input_and_settings(vocabulary_path):
    vocabulary = SubwordVocabulary(vocabulary_path)
    translator = Translator(
        CopyDecoder(vocabulary.size), vocabulary_path, beam_size=3, num_hypotheses=2
    )
    [empty, copied] = translator.translate(["", "a dog"])
    assert empty == [("", 0.0)]
    assert copied[0][0] == "a dog" and copied[0][1] > copied[1][1]
    with pytest.raises(ValueError):
        translator.translate(["a dog"], num_hypotheses=4)
    # More hypotheses than the translator was built with (up to the beam): all of them, best
    # first, and the same best as before; fewer afterwards still works.
    [three] = translator.translate(["a dog"], num_hypotheses=3)
    assert len(three) == 3 and three[:2] == copied
    assert [score for _, score in three] == sorted((score for _, score in three), reverse=True)
    assert translator.translate(["a dog"]) == [copied]
    with pytest.raises(ValueError):
        Translator(CopyDecoder(vocabulary.size), vocabulary_path, search="viterbi")


def test_greedy_and_sampling_search_settings(vocabulary_path):
    vocabulary = SubwordVocabulary(vocabulary_path)
    greedy = Translator(CopyDecoder(vocabulary.size), vocabulary_path, search="greedy")
    assert greedy.translate(["a dog", "hello"]) == ["a dog", "hello"]
    # The copy decoder puts probability ~1 on one token: sampling copies too.
    sampler = Translator(
        CopyDecoder(vocabulary.size),
        vocabulary_path,
        search="sample",
        top_k=3,
        temperature=0.5,
        seed=1,
    )
    assert sampler.translate(["a dog"]) == ["a dog"]


def _run_folder(tmp_path, vocabulary_path, model):
    import shutil

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(vocabulary_path, run / "vocab.model")
    (run / "config.json").write_text(model.config.to_json())
    return run


def test_load_from_run_folder_and_keras_file(vocabulary_path, tmp_path):
    vocabulary = SubwordVocabulary(vocabulary_path)
    model = tiny_model(vocab_size=vocabulary.size, max_length=48, seed=12, sharpen=2.0)
    expected = Translator(model, vocabulary_path, max_extra_length=5).translate(SENTENCES[:3])
    run = _run_folder(tmp_path, vocabulary_path, model)
    model.save(run / "model.keras")
    files = find_model_files(run)
    assert files["model"].endswith("model.keras") and files["vocabulary"].endswith("vocab.model")
    assert Translator.load(str(run), max_extra_length=5).translate(SENTENCES[:3]) == expected
    assert translate(SENTENCES[:3], model=str(run / "model.keras"), max_extra_length=5) == expected
    # averaged.keras, when there is one, wins over model.keras.
    other = tiny_model(vocab_size=vocabulary.size, max_length=48, seed=13, sharpen=2.0)
    other.save(run / "averaged.keras")
    assert find_model_files(run)["model"].endswith("averaged.keras")
    # An ensemble of the same model twice translates as the model.
    ensemble = Translator.load([str(run / "model.keras")] * 2, max_extra_length=5)
    assert ensemble.translate(SENTENCES[:3]) == expected


def test_translate_keeps_a_loaded_translator_while_its_files_are_unchanged(
    vocabulary_path, tmp_path, monkeypatch
):
    import collections
    import os

    from keras_transformer import translation

    monkeypatch.setattr(translation, "_kept_translators", collections.OrderedDict())
    loads = []
    load = Translator.load.__func__

    def counted_load(cls, *args, **kwargs):
        loads.append(args)
        return load(cls, *args, **kwargs)

    monkeypatch.setattr(Translator, "load", classmethod(counted_load))
    vocabulary = SubwordVocabulary(vocabulary_path)
    model = tiny_model(vocab_size=vocabulary.size, max_length=48, seed=12, sharpen=2.0)
    run = _run_folder(tmp_path, vocabulary_path, model)
    model.save(run / "model.keras")
    first = translate(SENTENCES[:3], model=str(run), max_extra_length=5)
    assert translate(SENTENCES[:3], model=str(run), max_extra_length=5) == first
    assert len(loads) == 1
    translate(SENTENCES[:3], model=str(run), max_extra_length=4)  # other settings
    assert len(loads) == 2
    # A new model file in the run (as averaging writes one) is loaded, and translates.
    other = tiny_model(vocab_size=vocabulary.size, max_length=48, seed=13, sharpen=2.0)
    other.save(run / "averaged.keras")
    expected = Translator(other, vocabulary_path, max_extra_length=5).translate(SENTENCES[:3])
    assert translate(SENTENCES[:3], model=str(run), max_extra_length=5) == expected
    assert len(loads) == 3
    # The same file rewritten (a new modification time) is loaded again.
    status = os.stat(run / "averaged.keras")
    os.utime(run / "averaged.keras", ns=(status.st_atime_ns, status.st_mtime_ns + 10**9))
    translate(SENTENCES[:3], model=str(run), max_extra_length=5)
    assert len(loads) == 4
    assert len(translation._kept_translators) <= translation.KEPT_TRANSLATORS
    # Sampling loads each call, so that a seed gives the same samples every call.
    sampled = [
        translate(SENTENCES[:3], model=str(run), search="sample", seed=3, max_extra_length=5)
        for _ in range(2)
    ]
    assert sampled[0] == sampled[1] and len(loads) == 6


def test_load_from_checkpoint(vocabulary_path, tmp_path):
    import tensorflow as tf

    from keras_transformer.runs.checkpoints import model_variables

    vocabulary = SubwordVocabulary(vocabulary_path)
    model = tiny_model(vocab_size=vocabulary.size, max_length=48, seed=12, sharpen=2.0)
    expected = Translator(model, vocabulary_path, max_extra_length=5).translate(SENTENCES[:3])
    run = _run_folder(tmp_path, vocabulary_path, model)
    # As training writes them (keras_transformer.runs.checkpoints.Checkpointer).
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(model=model_variables(model)), str(run / "checkpoints"), max_to_keep=2
    )
    prefix = manager.save()
    # No .keras file: the newest checkpoint, with config.json and vocab.model of the run.
    assert find_model_files(run)["kind"] == "checkpoint"
    assert find_model_files(prefix)["config"].endswith("config.json")
    assert translate(SENTENCES[:3], model=prefix, max_extra_length=5) == expected
    assert translate(SENTENCES[:3], model=str(run), max_extra_length=5) == expected


def test_load_errors_say_what_to_give(tmp_path, vocabulary_path):
    with pytest.raises(UserInputError, match="not a training output_dir"):
        find_model_files(tmp_path / "missing.keras")
    with pytest.raises(UserInputError, match="holds no averaged.keras"):
        find_model_files(tmp_path)
    model = tiny_model(vocab_size=8, max_length=16)
    with pytest.raises(UserInputError, match="vocabulary="):
        translate(["x"], model=model)
    with pytest.raises(UserInputError, match="does not exist"):
        SubwordVocabulary(tmp_path / "nope.model")
    with pytest.raises(UserInputError, match="has 25 pieces but the model only 8"):
        Translator(model, vocabulary_path)


def test_a_model_saved_into_a_run_carries_its_vocabulary(vocabulary_path, tmp_path):
    """Training saves .keras files with `atomic_save_model`: the file holds the run's
    SentencePiece model, so it translates with no vocab.model beside it."""
    vocabulary = SubwordVocabulary(vocabulary_path)
    model = tiny_model(vocab_size=vocabulary.size, max_length=48, seed=12, sharpen=2.0)
    # The reference: the in-memory model with the .model file given explicitly.
    expected = Translator(model, vocabulary_path, max_extra_length=5).translate(SENTENCES[:4])
    run = _run_folder(tmp_path, vocabulary_path, model)
    atomic_save_model(model, run / "model.keras")
    (run / "vocab.model").unlink()
    moved = tmp_path / "elsewhere.keras"
    (run / "model.keras").rename(moved)
    translator = Translator.load(str(moved), max_extra_length=5)
    assert translator.translate(SENTENCES[:4]) == expected
    with open(vocabulary_path, "rb") as file:
        assert translator.vocabulary.model_proto == file.read()
    # A model saved with no vocabulary, and none beside it, asks for one.
    bare = tiny_model(vocab_size=vocabulary.size, max_length=48, seed=12)
    bare.save(tmp_path / "bare.keras")
    with pytest.raises(UserInputError, match="carries no vocabulary.*vocabulary="):
        Translator.load(str(tmp_path / "bare.keras"))
    # An ensemble of models with different vocabularies is refused.
    import sentencepiece

    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(SENTENCES * 20 + ["xyz"]),
        model_prefix=str(tmp_path / "other"),
        vocab_size=40,
        model_type="char",
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        minloglevel=2,
    )
    other = tiny_model(vocab_size=vocabulary.size, max_length=48, seed=12)
    other.tokenizer = SubwordVocabulary(tmp_path / "other.model").to_tokenizer()
    other.save(tmp_path / "other.keras")
    with pytest.raises(UserInputError, match="different vocabularies"):
        Translator.load([str(moved), str(tmp_path / "other.keras")])


@pytest.mark.parametrize("search", ["beam", "greedy", "sample"])
def test_power_length_penalty_scores_are_log_prob_over_length_to_the_alpha(vocabulary_path, search):
    # Each hypothesis' score is its log P over |Y| ** alpha (|Y|: its tokens, eos counted),
    # and log P is the teacher-forced one (`score`) of its ids.
    vocabulary = SubwordVocabulary(vocabulary_path)
    model = tiny_model(vocab_size=25, max_length=32, seed=9, sharpen=2.0)
    n_best = 3 if search == "beam" else 1
    settings = dict(alpha=0.7, length_penalty="power", max_extra_length=4, search=search)
    translator = Translator(
        model, vocabulary_path, beam_size=3, num_hypotheses=n_best, compile=False, **settings
    )
    source = np.array([vocabulary.encode("a dog") + [EOS]], "int32")
    ids, lengths, log_probs, scores = translator.translate_ids(source)
    assert lengths.min() >= 2
    np.testing.assert_allclose(scores, log_probs / lengths.astype("float64") ** 0.7, atol=1e-5)
    for j in range(n_best):
        labels = ids[:, j, : lengths[0, j]]
        total, _ = translator._score(source, labels)
        np.testing.assert_allclose(ops.convert_to_numpy(total), log_probs[:, j], atol=1e-4)
    if search == "beam":  # translate(model=...) passes the choice on
        options = dict(beam_size=3, num_hypotheses=3, alpha=0.7, max_extra_length=4, compile=False)
        power = translate(["a dog"], model, vocabulary_path, length_penalty="power", **options)
        assert power == translator.translate(["a dog"])
        assert [score for _, score in power[0]] == pytest.approx(scores[0].tolist(), abs=1e-5)
