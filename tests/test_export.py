"""The SavedModel as TensorFlow Serving would use it: loaded without our code, by the TF1
session loader and by `tf.saved_model.load`, with hostile inputs and concurrent calls."""

import json
import shutil
import sys
import textwrap
import threading

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer.export.saved_model as saved_model_export
from keras_transformer.decoding import BeamSearch
from keras_transformer.decoding.settings import check_decoding_settings
from keras_transformer.errors import UserInputError
from keras_transformer.export import check_serving_ops, export_saved_model, saved_model_ops
from keras_transformer.translation import Translator
from tests import _export_fixtures, _preloaded_python
from tests._tensorflow_settings import CHILD_PRELUDE
from tests._training_fixtures import subprocess_env


@pytest.fixture(scope="module", autouse=True)
def _seed():
    """One seed for the module instead of one per test (tests/conftest.py): a reseed clears
    TensorFlow's kernel cache, so each loaded signature would take seconds to instantiate
    again on its next call, and these tests draw no random numbers of their own."""
    keras.utils.set_random_seed(1234)


MAX_EXTRA = 6  # short outputs keep a random model's decoding fast


@pytest.fixture(scope="module")
def exported(shared_export, tmp_path_factory):
    """The SavedModel the export tests share (tests/_export_fixtures.py: beam 2 at most,
    alpha 0.6, MAX_EXTRA extra tokens by default), with its model and vocabulary."""
    assert _export_fixtures.SETTINGS["max_extra_length"] == MAX_EXTRA
    return {
        "root": tmp_path_factory.mktemp("export"),  # a working folder of this module's own
        "path": shared_export.path,
        "model": shared_export.model,
        "vocab_path": shared_export.vocabulary_path,
        "serve": shared_export.loaded.signatures["serving_default"],
        "loaded": shared_export.loaded,
    }


def _translator(exported, **settings):
    options = dict(beam_size=2, alpha=0.6, max_extra_length=MAX_EXTRA)
    options.update(settings)
    return Translator(exported["model"], exported["vocab_path"], **options)


def _setting_tensors(settings):
    dtypes = {"alpha": tf.float32, "length_penalty": tf.string}
    return {k: tf.constant(v, dtypes.get(k, tf.int32)) for k, v in settings.items()}


def _serve(exported, texts, **settings):
    inputs = {"text": tf.constant(texts, tf.string)}
    inputs.update(
        _setting_tensors(
            {
                "beam_size": 2,
                "alpha": 0.6,
                "max_extra_length": MAX_EXTRA,
                "num_hypotheses": 1,
                "length_penalty": "gnmt",
                **settings,
            }
        )
    )
    outputs = exported["serve"](**inputs)
    return {k: v.numpy() for k, v in outputs.items()}


SENTENCES = [
    "four hundred twenty-one",
    "half past seven",
    "on March third",
    "one red dog",
    "nineteen ninety-eight",
    "seventy-two green bottles",
    "in twenty ten",
]


def test_layout_versions_and_never_overwrite(exported, monkeypatch, tmp_path):
    assert exported["path"].name == "1"
    assert (exported["path"] / "saved_model.pb").is_file()
    assert (exported["path"] / "variables").is_dir()
    # The writes below go to a copy: other tests read the shared export.
    model_dir = tmp_path / "saved_models" / "shared"
    shutil.copytree(exported["path"], model_dir / "1")
    with pytest.raises(UserInputError, match="already exists.*never overwrite"):
        export_saved_model(
            exported["model"],
            exported["vocab_path"],
            "shared",
            version=1,
            base_dir=model_dir.parent,
            max_beam_size=1,
            beam_size=1,
        )

    # A failed export leaves no version and no partial directory behind: here the whole
    # SavedModel is written into the staging folder, then writing its metadata fails. (The
    # failure is our own function's: a patched `tf.saved_model.save` went unseen by Keras's
    # archive after other tests had run in the process.)
    real_search = BeamSearch.__call__
    searches = []

    def fail_after_the_save(*args, **kwargs):
        raise OSError("disk full")

    def counted_search(search, *args, **kwargs):
        searches.append(search.beam_size)
        return real_search(search, *args, **kwargs)

    monkeypatch.setattr(saved_model_export, "_metadata", fail_after_the_save)
    monkeypatch.setattr(BeamSearch, "__call__", counted_search)
    with pytest.raises(OSError, match="disk full"):
        export_saved_model(
            exported["model"],
            exported["vocab_path"],
            "shared",
            base_dir=model_dir.parent,
            max_beam_size=1,
            beam_size=1,
        )
    assert sorted(p.name for p in model_dir.iterdir()) == ["1"]
    # The search of each width is traced once, the save included
    # (docs/decisions.md#endpoints-traced-once).
    assert searches == [1]


def test_graph_holds_only_core_and_sentencepiece_ops(exported, tmp_path):
    ops = check_serving_ops(exported["path"])
    assert {"SentencepieceTokenizeOp", "SentencepieceDetokenizeOp", "While"} <= set(ops)
    # The check catches what TF Serving cannot run: here a Python function.
    module = tf.Module()
    module.f = tf.function(
        lambda x: tf.py_function(lambda y: y, [x], tf.float32),
        input_signature=[tf.TensorSpec([], tf.float32)],
    )
    tf.saved_model.save(module, str(tmp_path / "py"), signatures=module.f)
    assert "EagerPyFunc" in saved_model_ops(tmp_path / "py")
    with pytest.raises(UserInputError, match="EagerPyFunc"):
        check_serving_ops(tmp_path / "py")


def test_signature_equals_in_process_translate(exported):
    served = _serve(exported, SENTENCES)
    expected = _translator(exported).translate(SENTENCES)
    assert [t.decode() for t in served["translation"]] == expected
    assert served["nbest_translations"].shape == (len(SENTENCES), 1)


def test_per_request_settings_change_the_search_as_translate_does(exported):
    for settings in (
        {"beam_size": 1},
        {"alpha": 0.0},
        {"alpha": 1.5},
        {"beam_size": 1, "max_extra_length": 2},
    ):
        served = _serve(exported, SENTENCES, **settings)
        translator = _translator(exported, **settings)
        ids = [translator.vocabulary.encode(s) + [3] for s in SENTENCES]
        expected = translator.translate(SENTENCES)
        assert [t.decode() for t in served["translation"]] == expected, settings
        # Scores are log P / lp(|Y|): alpha changes them.
        _, _, _, scores = translator.translate_ids(_pad(ids))
        np.testing.assert_allclose(served["score"], scores[:, 0], rtol=1e-4, atol=1e-4)
    # n-best
    served = _serve(exported, SENTENCES, num_hypotheses=2)
    expected = _translator(exported, num_hypotheses=2).translate(SENTENCES)
    assert served["nbest_translations"].shape == (len(SENTENCES), 2)
    for row, hypotheses in enumerate(expected):
        assert [t.decode() for t in served["nbest_translations"][row]] == [h for h, _ in hypotheses]


# Out-of-range settings for the fixture's export (max_beam_size 2): the cases of
# tests/test_decoding_settings.py that a tensor can carry.
BAD_SETTINGS = [
    {"beam_size": 0},
    {"beam_size": 3},
    {"alpha": float("nan")},
    {"alpha": float("inf")},
    {"alpha": -0.5},
    {"alpha": 10.5},
    {"max_extra_length": -1},
    {"max_extra_length": 65537},
    {"max_extra_length": 2**31 - 1},
    {"num_hypotheses": 0},
    {"num_hypotheses": 2, "beam_size": 1},
    {"length_penalty": "linear"},
]
THROUGH_TEXT = [{"alpha": float("inf")}, {"num_hypotheses": 2, "beam_size": 1}]


@pytest.mark.parametrize("settings", BAD_SETTINGS)
def test_out_of_range_settings_fail_as_translate_does(exported, settings):
    full = {
        "beam_size": 2,
        "alpha": 0.6,
        "max_extra_length": MAX_EXTRA,
        "num_hypotheses": 1,
        "length_penalty": "gnmt",
        **settings,
    }
    with pytest.raises(UserInputError) as python_error:
        check_decoding_settings(max_beam_size=2, **full)
    tensors = _setting_tensors(full)
    signatures = [("translate_ids", {"source_ids": tf.constant([[5, 3]])})]
    if settings in THROUGH_TEXT:
        # Both signatures check through the same `_search`; a failed call costs seconds, so
        # the text signature is asked one static and one per-request (num_hypotheses) bound.
        signatures.append(("serving_default", {"text": tf.constant(["one red dog"])}))
    for name, inputs in signatures:
        with pytest.raises(tf.errors.InvalidArgumentError) as error:
            exported["loaded"].signatures[name](**inputs, **tensors)
        assert f"assertion failed: [{python_error.value}]" in str(error.value), name


def test_the_length_penalty_is_chosen_per_request_as_translate_chooses_it(exported):
    # alpha 1.5 under either form: "power" divides by |Y| ** 1.5, "gnmt" by ((5 + |Y|) / 6)
    # ** 1.5; each request gets what a Translator of its form gives.
    for form in ("power", "gnmt"):
        translator = _translator(exported, alpha=1.5, num_hypotheses=2, length_penalty=form)
        expected = translator.translate(SENTENCES)
        served = _serve(exported, SENTENCES, alpha=1.5, num_hypotheses=2, length_penalty=form)
        texts = [[t.decode() for t in row] for row in served["nbest_translations"]]
        assert texts == [[text for text, _ in hypotheses] for hypotheses in expected]
        np.testing.assert_allclose(
            served["nbest_scores"], [[s for _, s in h] for h in expected], atol=1e-4
        )
    power = _serve(exported, SENTENCES[:1], alpha=1.5, length_penalty="power")
    gnmt = _serve(exported, SENTENCES[:1], alpha=1.5)
    assert power["score"][0] != pytest.approx(gnmt["score"][0], abs=1e-3)


def test_out_of_range_message_written_out():
    with pytest.raises(
        UserInputError,
        match=r"^beam_size=3 is out of range: it must be an "
        r"integer in \[1, 2\]$",
    ):
        check_decoding_settings(beam_size=3, max_beam_size=2)


def test_settings_at_their_bounds_are_served(exported):
    for settings in (
        {"beam_size": 2, "num_hypotheses": 2},
        {"alpha": 0.0},
        {"alpha": 10.0},
        {"max_extra_length": 0},
    ):
        served = _serve(exported, SENTENCES[:2], **settings)
        assert served["translation"].shape == (2,), settings


def test_export_defaults_follow_the_same_rule(exported, tmp_path):
    for settings in ({"alpha": -1.0}, {"beam_size": 3}, {"max_extra_length": -1}):
        with pytest.raises(UserInputError, match="is out of range"):
            export_saved_model(
                exported["model"],
                exported["vocab_path"],
                "bad",
                base_dir=tmp_path,
                max_beam_size=2,
                **{"beam_size": 2, **settings},
            )
    assert not (tmp_path / "bad").exists()


def _pad(rows):
    width = max(len(r) for r in rows)
    return np.array([r + [0] * (width - len(r)) for r in rows], "int32")


@pytest.fixture(scope="module")
def session_loader(exported):
    """The export loaded by the TF1 session loader, as TF Serving's C++ loader loads it; runs
    a signature with every input fed (the SignatureDef's defaults are TF Serving's to apply)."""
    graph = tf.Graph()
    session = tf.compat.v1.Session(graph=graph)
    with graph.as_default():
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(exported["path"]))

    def run(name, inputs):
        signature = meta.signature_def[name]
        feed = {
            info.name: np.asarray(inputs[key], tf.dtypes.as_dtype(info.dtype).as_numpy_dtype)
            for key, info in signature.inputs.items()
        }
        fetches = {key: info.name for key, info in signature.outputs.items()}
        return session.run(fetches, feed_dict=feed)

    run.signature_names = sorted(name for name in meta.signature_def if not name.startswith("__"))
    run.signature_inputs = {
        name: sorted(meta.signature_def[name].inputs) for name in run.signature_names
    }
    yield run
    session.close()


# A request for each input any signature takes: a text batch with an empty line and unknown
# characters, an id batch with padding, n-best 2 of beam 2, seeded sampling.
REQUEST = {
    "text": ["one red dog", "", "half past seven 🎉"],
    "target_prefix": ["ein", "", "halb"],
    "source": ["one red dog", "", "half past seven"],
    "target": ["ein roter hund", "x", ""],
    "source_ids": [[5, 6, 7, 3], [8, 3, 0, 0], [9, 10, 3, 0]],
    "prefix_ids": [[5, 0], [0, 0], [6, 7]],
    "beam_size": 2,
    "alpha": 0.6,
    "length_penalty": "gnmt",
    "max_extra_length": MAX_EXTRA,
    "num_hypotheses": 2,
    "top_k": 3,
    "top_p": 0.9,
    "temperature": 1.0,
    "seed": 7,
}
SIGNATURES = [
    "score_pairs",
    "serving_default",
    "translate",
    "translate_ids",
    "translate_ids_with_prefix",
    "translate_sample",
    "translate_with_alignments",
    "translate_with_prefix",
]


def _assert_same_outputs(session_outputs, tf2_outputs, where):
    assert sorted(session_outputs) == sorted(tf2_outputs), where
    for key, value in tf2_outputs.items():
        expected, got = value.numpy(), session_outputs[key]
        if expected.dtype.kind in "fc":
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=key)
        else:
            np.testing.assert_array_equal(got, expected, err_msg=f"{where}: {key}")


def test_every_signature_answers_the_session_loader_as_the_tf2_call(exported, session_loader):
    """TF Serving runs every SignatureDef through the session loader: each gives what the TF2
    loader's call gives for the same request."""
    assert session_loader.signature_names == SIGNATURES  # a new one is listed here, and run
    for name in SIGNATURES:
        keys = session_loader.signature_inputs[name]
        function = exported["loaded"].signatures[name]
        tf2 = function(
            **{
                key: tf.constant(REQUEST[key], function.structured_input_signature[1][key].dtype)
                for key in keys
            }
        )
        _assert_same_outputs(session_loader(name, REQUEST), tf2, name)


HOSTILE = [
    "",
    "   ",
    "\t\n",
    "x" * 10000,
    "control\x00\x07\x1bchars",
    "emoji 🎉🚀 ok",
    "中文测试",
    "עברית مرحبا",
    "four hundred twenty-one",
]


def test_hostile_inputs_give_each_row_what_it_gets_alone(exported, session_loader):
    served = _serve(exported, HOSTILE)
    assert served["translation"].shape == (len(HOSTILE),)
    assert list(served["translation"][:3]) == [b"", b"", b""]
    assert list(served["score"][:3]) == [0.0, 0.0, 0.0]
    # Each row is the one its input gets alone: the batch keeps order and rows apart.
    for index, text in enumerate(HOSTILE):
        alone = _serve(exported, [text])
        for key in ("translation", "nbest_translations"):
            np.testing.assert_array_equal(served[key][index], alone[key][0], err_msg=repr(text))
        # The score's sums run over another padding: equal up to float32 rounding.
        np.testing.assert_allclose(served["score"][index], alone["score"][0], atol=1e-5)
    # The rows a Translator takes whole (the 10000 characters exceed the model's positions)
    # are its translations.
    takes = [text for text in HOSTILE if len(text) < 40]
    expected = dict(zip(takes, _translator(exported).translate(takes)))
    for text, output in zip(HOSTILE, served["translation"]):
        if text in expected:
            assert output.decode() == expected[text], repr(text)
    # The same batch through the session loader, as TF Serving runs it.
    request = {**REQUEST, "text": HOSTILE, "num_hypotheses": 1}
    replayed = session_loader("serving_default", request)
    for key in served:
        np.testing.assert_array_equal(replayed[key], served[key], err_msg=key)
    # Invalid UTF-8 bytes go through the graph too, each row as alone.
    raw = [b"\xff\xfe\xfd", b"ok"]
    both = _serve(exported, raw, beam_size=1, max_extra_length=2)["translation"]
    for index, text in enumerate(raw):
        assert (
            both[index]
            == _serve(exported, [text], beam_size=1, max_extra_length=2)["translation"][0]
        )
    # A batch of 0 and a batch of 512.
    assert _serve(exported, [])["translation"].shape == (0,)
    big = [SENTENCES[i % len(SENTENCES)] for i in range(512)]
    outputs = _serve(exported, big, beam_size=1, max_extra_length=2)["translation"]
    reference = _serve(exported, SENTENCES, beam_size=1, max_extra_length=2)["translation"]
    assert list(outputs) == [reference[i % len(SENTENCES)] for i in range(512)]


def test_concurrent_calls(exported):
    # 8 threads at once, 25 calls each; benchmarks/serving_soak.py is the long soak (8 x 1000).
    errors, results = [], []

    def worker(seed):
        try:
            for call in range(25):
                text = SENTENCES[(seed + call) % len(SENTENCES)]
                out = _serve(exported, [text], beam_size=1, max_extra_length=2)
                results.append((text, out["translation"][0]))
        except Exception as error:  # noqa: BLE001 - the test counts every failure
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(results) == 200
    assert len({(text, out) for text, out in results}) == len(SENTENCES)  # deterministic


# CHILD_PRELUDE: Grappler off, as in this process, whose Translator the outputs are compared
# with (tests/_tensorflow_settings.py); it imports TensorFlow only, not our package.
LOADER = CHILD_PRELUDE + textwrap.dedent(
    """
    import json, sys
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the SentencePiece ops, as TF Serving links them
    path, texts = sys.argv[1], json.loads(sys.argv[2])

    # 1. The TF2 loader.
    loaded = tf.saved_model.load(path)
    v2 = loaded.signatures["serving_default"](
        text=tf.constant(texts), beam_size=tf.constant(2), alpha=tf.constant(0.6),
        max_extra_length=tf.constant(MAX_EXTRA), num_hypotheses=tf.constant(1),
        length_penalty=tf.constant("gnmt"))
    v2 = [t.decode() for t in v2["translation"].numpy()]
    # A concrete function needs every input (the SignatureDef's defaults are not applied)...
    try:
        loaded.signatures["serving_default"](text=tf.constant(texts))
        missing = None
    except TypeError as error:
        missing = str(error)
    # ...so the text-only endpoint is the TF2 call with the defaults.
    text_only = [t.decode() for t in loaded.translate(texts)["translation"].numpy()]
    text_only_signature = [t.decode() for t in loaded.signatures["translate"](
        text=tf.constant(texts))["translation"].numpy()]

    # 2. The TF1 session loader (TF Serving's C++ loader does the same), feeding only `text`
    #    and taking the other inputs from the SignatureDef's defaults, as TF Serving does.
    with tf.compat.v1.Session(graph=tf.Graph()) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
        signature = meta.signature_def["serving_default"]
        feed = {signature.inputs["text"].name: texts}
        for key, tensor_info in signature.inputs.items():
            if key != "text":
                feed[tensor_info.name] = tf.make_ndarray(signature.defaults[key])
        v1 = session.run(signature.outputs["translation"].name, feed_dict=feed)
        v1 = [t.decode() for t in v1]
        # An out-of-range setting: InvalidArgument (TF Serving's status) naming it.
        feed[signature.inputs["beam_size"].name] = 0
        try:
            session.run(signature.outputs["translation"].name, feed_dict=feed)
            invalid = None
        except tf.errors.InvalidArgumentError as error:
            invalid = error.message
    assert not any(m.startswith("keras_transformer") for m in sys.modules)
    print(json.dumps({"v1": v1, "v2": v2, "defaults": sorted(signature.defaults),
                      "missing": missing, "text_only": text_only,
                      "text_only_signature": text_only_signature, "invalid": invalid}))
""".replace("MAX_EXTRA", str(MAX_EXTRA))
)


def test_loads_in_a_fresh_process_without_our_code(exported):
    result = _preloaded_python.run(
        [sys.executable, "-c", LOADER, str(exported["path"]), json.dumps(SENTENCES)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=exported["root"],
        env=subprocess_env(),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = json.loads(result.stdout.strip().splitlines()[-1])
    expected = _translator(exported).translate(SENTENCES)
    assert outputs["v2"] == expected
    assert outputs["v1"] == expected  # defaults: beam 2, alpha 0.6, max_extra_length 6
    assert outputs["defaults"] == [
        "alpha",
        "beam_size",
        "length_penalty",
        "max_extra_length",
        "num_hypotheses",
    ]
    assert "missing a required argument" in outputs["missing"]
    assert outputs["text_only"] == expected
    assert outputs["text_only_signature"] == expected
    assert "beam_size=0 is out of range: it must be an integer in [1, 2]" in outputs["invalid"]


def test_parity_on_newstest2013(exported, data_dir):
    lines = (data_dir / "wmt" / "newstest2013.en").read_text(encoding="utf-8").splitlines()[:50]
    served = _serve(exported, lines)
    with pytest.warns(UserWarning, match="tokens"):  # long news lines exceed max_length 48
        expected = _translator(exported).translate(lines)
    assert [t.decode() for t in served["translation"]] == expected
