"""The SavedModel's `translate_sample` signature: Python's `sample()` with noise drawn from the
request's seed, its settings checked in the graph, its defaults in the SignatureDef."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer.data.vocabulary import SubwordVocabulary
from keras_transformer.decoding import greedy_search, sample
from keras_transformer.decoding.length_penalty import max_output_lengths
from tests._decoding_fixtures import EOS, PAD
from tests._export_fixtures import SETTINGS

tf = pytest.importorskip("tensorflow")


@pytest.fixture(scope="module", autouse=True)
def _seed():
    """One seed for the module instead of one per test (tests/conftest.py): a reseed clears
    TensorFlow's kernel cache, so each loaded signature would take seconds to instantiate
    again on its next call, and these tests draw no random numbers of their own."""
    keras.utils.set_random_seed(1234)


TEXTS = ["the cat sat", "a dog", "", "hello", "it rains"]
MAX_EXTRA_LENGTH = SETTINGS["max_extra_length"]


@pytest.fixture(scope="module")
def vocabulary_path(shared_export):
    return shared_export.vocabulary_path


@pytest.fixture(scope="module")
def model(shared_export):
    return shared_export.model


@pytest.fixture(scope="module")
def exported(shared_export):
    """The shared export (tests/_export_fixtures.py): max_length 48, the requests'
    max_extra_length its default."""
    return shared_export.path, shared_export.loaded


def request(loaded, texts=TEXTS, top_k=0, top_p=1.0, temperature=1.0, seed=0):
    outputs = loaded.signatures["translate_sample"](
        text=tf.constant(texts),
        top_k=tf.constant(top_k, tf.int32),
        top_p=tf.constant(top_p, tf.float32),
        temperature=tf.constant(temperature, tf.float32),
        max_extra_length=tf.constant(MAX_EXTRA_LENGTH, tf.int32),
        seed=tf.constant(seed, tf.int64),
    )
    return [t.decode() for t in outputs["translation"].numpy()], outputs["score"].numpy()


def source_batch(vocabulary, texts):
    rows = [vocabulary.encode(text) + [EOS] for text in texts]
    width = max(map(len, rows))
    return np.array([row + [PAD] * (width - len(row)) for row in rows], "int32")


def texts_of(vocabulary, result):
    ids, lengths = (np.asarray(ops.convert_to_numpy(x))[:, 0] for x in result[:2])
    return [
        vocabulary.decode([int(t) for t in row[:n] if t != EOS]) for row, n in zip(ids, lengths)
    ]


@pytest.mark.parametrize(
    "settings",
    [dict(), dict(top_k=6, top_p=0.8, temperature=0.7, seed=11), dict(temperature=1.5, seed=3)],
    ids=["plain", "top-k-top-p", "flat"],
)
def test_a_seed_gives_python_samples_drawn_with_its_noise(
    exported, vocabulary_path, model, settings
):
    _, loaded = exported
    served, scores = request(loaded, **settings)
    assert request(loaded, **settings)[0] == served  # the same seed, the same sample
    vocabulary = SubwordVocabulary(vocabulary_path)
    # The whole batch, blank text included: the noise has a column per text.
    source_ids = source_batch(vocabulary, TEXTS)
    _, buffer_length = max_output_lengths(source_ids, PAD, MAX_EXTRA_LENGTH, 48)
    noise = tf.random.stateless_uniform(
        [buffer_length, len(TEXTS)], tf.constant([settings.get("seed", 0), 0], tf.int64)
    )
    result = sample(
        model,
        source_ids,
        top_k=settings.get("top_k", 0),
        temperature=settings.get("temperature", 1.0),
        top_p=settings.get("top_p", 1.0),
        max_extra_length=MAX_EXTRA_LENGTH,
        noise=noise.numpy(),
    )
    expected = texts_of(vocabulary, result)
    log_probs = np.asarray(ops.convert_to_numpy(result.log_probs))[:, 0]
    for row, text in enumerate(TEXTS):
        if text:
            assert served[row] == expected[row]
            np.testing.assert_allclose(scores[row], log_probs[row], rtol=1e-4)
    assert served[2] == "" and scores[2] == 0.0  # a blank text, as translate()


def test_seeds_differ_and_a_one_token_choice_is_greedy(exported, vocabulary_path, model):
    _, loaded = exported
    assert len({tuple(request(loaded, seed=seed)[0]) for seed in range(4)}) > 1
    vocabulary = SubwordVocabulary(vocabulary_path)
    texts = [t for t in TEXTS if t]
    greedy = texts_of(
        vocabulary, greedy_search(model, source_batch(vocabulary, texts), MAX_EXTRA_LENGTH)
    )
    # top_k=1, or a nucleus so small it holds the most probable token only: argmax per step.
    for settings in (dict(top_k=1, seed=5), dict(top_p=1e-6, seed=9, temperature=2.0)):
        served, _ = request(loaded, **settings)
        assert [t for t, text in zip(served, TEXTS) if text] == greedy


@pytest.mark.parametrize(
    "name, value",
    [("top_p", 0.0), ("top_p", 1.5), ("top_p", float("nan")), ("temperature", 0.0), ("top_k", -1)],
)
def test_out_of_range_settings_fail_naming_the_input(exported, name, value):
    _, loaded = exported
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"{name}=.* is out of range"):
        request(loaded, **{name: value})


def test_session_loader_samples_with_the_signature_defaults(exported):
    """As TF Serving runs a request that sends `text` only: the TF1 session loader, the
    settings from the SignatureDef's defaults."""
    from keras_transformer.export import check_serving_ops

    path, loaded = exported
    check_serving_ops(path)  # the stateless noise adds no op that TF Serving lacks
    with tf.compat.v1.Session(graph=tf.Graph()) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(path))
        signature = meta.signature_def["translate_sample"]
        assert sorted(signature.defaults) == [
            "max_extra_length",
            "seed",
            "temperature",
            "top_k",
            "top_p",
        ]
        defaults = {key: tf.make_ndarray(value) for key, value in signature.defaults.items()}
        feed = {signature.inputs["text"].name: TEXTS}
        for key, value in defaults.items():
            feed[signature.inputs[key].name] = value
        served = session.run(signature.outputs["translation"].name, feed_dict=feed)
    assert defaults["top_k"] == 0 and defaults["seed"] == 0
    assert defaults["top_p"] == 1.0 and defaults["temperature"] == 1.0
    assert defaults["max_extra_length"] == MAX_EXTRA_LENGTH
    assert [t.decode() for t in served] == request(loaded)[0]
