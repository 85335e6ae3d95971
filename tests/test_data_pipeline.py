"""Tests of keras_transformer.data.pipeline on multi30k: one epoch, budgets, order, replicas."""

import collections
import hashlib
import json
import os
import pathlib
import sys
import textwrap

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from keras_transformer.data import pipeline as data_pipeline  # noqa: E402
from keras_transformer.data.corpora import TextPairCorpus  # noqa: E402
from keras_transformer.errors import UserInputError  # noqa: E402
from tests import _preloaded_python  # noqa: E402
from tests._tensorflow_settings import CHILD_PRELUDE  # noqa: E402
from tests.data_fixtures import (  # noqa: E402
    multi30k_paths,
    multi30k_vocabulary,
    read_text_lines,
    shared_data_dir,
)

BOS, EOS = 2, 3
REPO = pathlib.Path(__file__).resolve().parents[1]


def _multi30k(split="train"):
    return TextPairCorpus(*multi30k_paths(shared_data_dir(), split))


def _batches(dataset):
    return [
        (inputs["source_ids"], inputs["target_ids"], labels)
        for inputs, labels in dataset.as_numpy_iterator()
    ]


def _rows(batches):
    """Each pair of the batches as (source_ids, target_ids, labels) tuples, padding removed."""
    for source, target, labels in batches:
        for row in range(source.shape[0]):
            # Id 0 is pad and nothing else, so the non-zero ids are the sequence.
            yield tuple(
                tuple(int(i) for i in ids[row][ids[row] != 0]) for ids in (source, target, labels)
            )


def _checksum(rows):
    digests = sorted(hashlib.sha256(repr(row).encode()).hexdigest() for row in rows)
    return hashlib.sha256("".join(digests).encode()).hexdigest()


@pytest.fixture(scope="module")
def reference_pairs():
    """multi30k train encoded by the Python SentencePiece library, independently of tf.data."""
    processor = multi30k_vocabulary().processor
    source_path, target_path = multi30k_paths(shared_data_dir())
    return [
        (processor.encode(s), processor.encode(t))
        for s, t in zip(read_text_lines(source_path), read_text_lines(target_path))
    ]


@pytest.fixture(scope="module")
def epoch_at_4096():
    pipeline = data_pipeline.TranslationPipeline(
        _multi30k(), multi30k_vocabulary(), token_budget=4096, max_length=32
    )
    return pipeline, _batches(pipeline.dataset(seed=11))


def test_one_epoch_holds_every_pair_once_except_reported_filtered(reference_pairs, epoch_at_4096):
    pipeline, batches = epoch_at_4096
    max_length = 32
    expected = [
        (tuple(s) + (EOS,), (BOS,) + tuple(t), tuple(t) + (EOS,))
        for s, t in reference_pairs
        if s and t and len(s) + 1 <= max_length and len(t) + 1 <= max_length
    ]
    too_long = sum(
        1
        for s, t in reference_pairs
        if s and t and (len(s) + 1 > max_length or len(t) + 1 > max_length)
    )
    empty = sum(1 for s, t in reference_pairs if not s or not t)
    assert too_long > 0  # max_length 32 is short enough to exercise the filter
    rows = list(_rows(batches))
    assert len(rows) == len(expected)
    assert collections.Counter(rows) == collections.Counter(expected)
    assert _checksum(rows) == _checksum(expected)

    report = pipeline.report()
    assert report.pairs_read == 29000 == len(reference_pairs)
    assert report.dropped_too_long == too_long and report.dropped_empty == empty
    assert report.pairs_kept == len(expected)
    assert report.source_tokens == sum(len(row[0]) for row in expected)
    assert report.target_tokens == sum(len(row[2]) for row in expected)
    assert report.batches_per_epoch == len(batches)


def test_every_batch_respects_the_budget_and_padding_is_low(epoch_at_4096):
    _, batches = epoch_at_4096
    real = padded = 0
    for source, target, labels in batches:
        assert source.dtype == target.dtype == labels.dtype == np.int32
        assert target.shape == labels.shape
        assert source.size <= 4096 and labels.size <= 4096
        real += np.count_nonzero(source) + np.count_nonzero(labels)
        padded += source.size + labels.size
        # Decoder input is the labels shifted right behind bos.
        assert (target[:, 0] == BOS).all()
        np.testing.assert_array_equal(
            target[:, 1:], np.where(labels[:, :-1] == EOS, 0, labels[:, :-1])
        )
        lengths = np.count_nonzero(labels, axis=1)
        assert (labels[np.arange(len(labels)), lengths - 1] == EOS).all()
    assert 1 - real / padded < 0.15


def test_budget_4096_at_max_length_256_and_report_log(caplog):
    with caplog.at_level("INFO"):
        dataset = data_pipeline.make_dataset(
            _multi30k("val"), multi30k_vocabulary(), token_budget=4096, max_length=256, seed=1
        )
    assert "1014 of 1014 pairs kept" in caplog.text
    real = padded = 0
    for inputs, labels in dataset.as_numpy_iterator():
        assert inputs["source_ids"].size <= 4096 and labels.size <= 4096
        real += np.count_nonzero(inputs["source_ids"]) + np.count_nonzero(labels)
        padded += inputs["source_ids"].size + labels.size
    assert 1 - real / padded < 0.15


def test_same_seed_same_batches_other_seed_other_order():
    def first_batches(seed):
        pipeline = data_pipeline.TranslationPipeline(
            _multi30k("val"), multi30k_vocabulary(), token_budget=1024, max_length=64
        )
        return _batches(pipeline.dataset(seed=seed))

    first, again, other = first_batches(5), first_batches(5), first_batches(6)
    assert len(first) == len(again)
    for a, b in zip(first, again):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    assert any(a[0].shape != b[0].shape or (a[0] != b[0]).any() for a, b in zip(first, other))
    assert _checksum(_rows(first)) == _checksum(_rows(other))  # same pairs, other order


def test_repeat_gives_only_full_even_batches_across_epochs():
    pipeline = data_pipeline.TranslationPipeline(
        _multi30k("val"), multi30k_vocabulary(), token_budget=512, max_length=64, num_replicas=2
    )
    report = pipeline.report()
    sizes = dict(zip(range(len(pipeline.batch_sizes)), pipeline.batch_sizes))
    boundaries = pipeline.boundaries
    for inputs, labels in (
        pipeline.dataset(seed=3, repeat=True).take(3 * report.batches_per_epoch).as_numpy_iterator()
    ):
        rows = labels.shape[0]
        longest = max(inputs["source_ids"].shape[1], labels.shape[1])
        assert rows == sizes[int(np.searchsorted(boundaries, longest, side="right"))]
        assert rows % 2 == 0
        # Each replica's half respects the per-replica budget.
        assert rows // 2 * inputs["source_ids"].shape[1] <= 512
        assert rows // 2 * labels.shape[1] <= 512


def test_empty_lines_are_dropped_and_counted(tmp_path, caplog):
    (tmp_path / "e.en").write_text("A dog.\n\nTwo cats.\nA man.\n", encoding="utf-8")
    (tmp_path / "e.de").write_text("Ein Hund.\nLeer.\n   \nEin Mann.\n", encoding="utf-8")
    corpus = TextPairCorpus(tmp_path / "e.en", tmp_path / "e.de")
    with caplog.at_level("WARNING"):
        dataset = data_pipeline.make_dataset(
            corpus, multi30k_vocabulary(), token_budget=64, max_length=32, seed=0
        )
    assert "left out 2 pairs with an empty side" in caplog.text
    assert sum(labels.shape[0] for _, labels in dataset.as_numpy_iterator()) == 2


def test_cache_gives_the_same_batches_and_is_reused(tmp_path):
    vocabulary = multi30k_vocabulary()
    plain = data_pipeline.TranslationPipeline(
        _multi30k("val"), vocabulary, token_budget=1024, max_length=64
    )
    cached = data_pipeline.TranslationPipeline(
        _multi30k("val"), vocabulary, token_budget=1024, max_length=64, cache_dir=str(tmp_path)
    )
    assert cached.report() == plain.report()
    (entry,) = os.listdir(tmp_path)
    assert os.path.exists(tmp_path / entry / "complete")
    # The same shuffle seed permutes ids (cache) as it permutes text (no cache).
    for a, b in zip(_batches(plain.dataset(seed=2)), _batches(cached.dataset(seed=2))):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    again = data_pipeline.TranslationPipeline(
        _multi30k("val"), vocabulary, token_budget=1024, max_length=64, cache_dir=str(tmp_path)
    )
    assert again.report() == plain.report() and os.listdir(tmp_path) == [entry]


def test_dataset_survives_reseeding_after_it_is_made():
    import keras

    dataset = data_pipeline.make_dataset(
        _multi30k("val"), multi30k_vocabulary(), token_budget=1024, max_length=64, seed=1
    )
    # Reseeding clears TensorFlow's eager kernel cache; the tokenizer must not live there.
    keras.utils.set_random_seed(99)
    assert sum(labels.shape[0] for _, labels in dataset.as_numpy_iterator()) == 1014


def test_several_corpora_one_epoch(tmp_path):
    val, test = _multi30k("val"), _multi30k("test_2016_flickr")
    pipeline = data_pipeline.TranslationPipeline(
        [val, test], multi30k_vocabulary(), token_budget=1024, max_length=128
    )
    assert pipeline.report().pairs_read == 2014
    rows = list(_rows(_batches(pipeline.dataset(seed=4))))
    assert len(rows) == 2014 == pipeline.report().pairs_kept


def test_settings_errors(tmp_path):
    vocabulary = multi30k_vocabulary()
    with pytest.raises(UserInputError, match="cannot hold one pair"):
        data_pipeline.TranslationPipeline(
            _multi30k("val"), vocabulary, token_budget=100, max_length=256
        )
    (tmp_path / "t.en").write_text("A dog.\n", encoding="utf-8")
    (tmp_path / "t.de").write_text("Ein Hund.\n", encoding="utf-8")
    tiny = data_pipeline.TranslationPipeline(
        TextPairCorpus(tmp_path / "t.en", tmp_path / "t.de"),
        vocabulary,
        token_budget=256,
        max_length=64,
        num_replicas=2,
    )
    with pytest.raises(UserInputError, match="does not fill a single batch"):
        tiny.dataset(seed=0)
    with pytest.raises(UserInputError, match="does not exist"):
        data_pipeline.TranslationPipeline(_multi30k("val"), str(tmp_path / "no.model"))


_MIRRORED_SCRIPT = CHILD_PRELUDE + textwrap.dedent("""
    import json, os, sys
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    # Two logical CPUs: must be set before TensorFlow initialises, hence this subprocess.
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    import keras_transformer
    from keras_transformer.data import TextPairCorpus, SubwordVocabulary, TranslationPipeline

    model_path, source, target = sys.argv[1:4]
    keras.utils.set_random_seed(0)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    vocabulary = SubwordVocabulary.from_file(model_path)
    pipeline = TranslationPipeline(TextPairCorpus(source, target), vocabulary,
                                   token_budget=256, max_length=64,
                                   num_replicas=strategy.num_replicas_in_sync)
    result = {"replicas": strategy.num_replicas_in_sync, "shares": []}
    distributed = strategy.experimental_distribute_dataset(
        pipeline.dataset(seed=1, repeat=True))
    for step, (inputs, labels) in zip(range(5), distributed):
        local = strategy.experimental_local_results(labels)
        sources = strategy.experimental_local_results(inputs["source_ids"])
        result["shares"].append({
            "global_rows": None,
            "labels": [list(t.shape) for t in local],
            "sources": [list(t.shape) for t in sources],
        })
    with strategy.scope():
        config = keras_transformer.TransformerConfig(
            vocab_size=vocabulary.size, num_layers=1, d_model=32, d_ff=64, num_heads=2,
            dropout=0.1, label_smoothing=0.1)
        model = keras_transformer.build_model(config)
        model.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss=keras_transformer.LabelSmoothedCrossEntropy(0.1))
    history = model.fit(pipeline.dataset(seed=1, repeat=True), steps_per_epoch=3, epochs=1,
                        verbose=0)
    # One finite epoch too: full even batches first, then the partial ones that end it.
    epoch = model.fit(pipeline.dataset(seed=2), epochs=1, verbose=0)
    result["loss"] = history.history["loss"]
    result["epoch_loss"] = epoch.history["loss"]
    print("RESULT " + json.dumps(result))
""")


def test_mirrored_strategy_two_logical_cpus_even_shares_and_fit_runs(tmp_path):
    vocabulary = multi30k_vocabulary()
    # The first 600 pairs of multi30k val: full and partial batches, and few batch shapes for
    # fit to trace (300 filled one bucket's batch, by 2 pairs: too close to the edge).
    source, target = tmp_path / "val.en", tmp_path / "val.de"
    for path, lines in zip(
        (source, target), map(read_text_lines, multi30k_paths(shared_data_dir(), "val"))
    ):
        path.write_text("".join(line + "\n" for line in lines[:600]), encoding="utf-8")
    script = tmp_path / "mirrored.py"
    script.write_text(_MIRRORED_SCRIPT, encoding="utf-8")
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="2",
        KERAS_BACKEND="tensorflow",
        PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    completed = _preloaded_python.run(
        [sys.executable, str(script), vocabulary.path, str(source), str(target)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=str(REPO),
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    line = next(line for line in completed.stdout.splitlines() if line.startswith("RESULT "))
    result = json.loads(line[len("RESULT ") :])
    assert result["replicas"] == 2
    for share in result["shares"]:
        (first, second) = share["labels"]
        assert first == second  # each replica receives an equal share
        assert first[0] >= 1 and first[0] * first[1] <= 256  # and its own budget
        (first, second) = share["sources"]
        assert first == second and first[0] * first[1] <= 256
    assert all(np.isfinite(result["loss"])) and all(np.isfinite(result["epoch_loss"]))
