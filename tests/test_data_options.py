"""The package's datasets start no tf.data autotuning thread (docs/decisions.md#tf-data-autotune-off):
the training batches, the pipeline's report pass, the checkpointable feed that `fit` reads."""

import doctest

import tensorflow as tf

from keras_transformer.data import options
from keras_transformer.data import pipeline as data_pipeline
from keras_transformer.data.corpora import TextPairCorpus
from keras_transformer.training.distributed_feed import CheckpointableFeed
from tests.data_fixtures import multi30k_paths, multi30k_vocabulary, shared_data_dir


def test_the_documented_example_runs():
    result = doctest.testmod(options)
    assert result.attempted > 0 and result.failed == 0


def test_the_default_that_the_setting_turns_off():
    # If tf.data's default ever changed, the setting would be worth re-measuring.
    assert tf.data.Dataset.range(3).options().autotune.enabled is None
    assert (
        options.without_autotune_thread(tf.data.Dataset.range(3)).options().autotune.enabled
        is False
    )


def _pipeline():
    corpus = TextPairCorpus(*multi30k_paths(shared_data_dir(), "val"))
    return data_pipeline.TranslationPipeline(corpus, multi30k_vocabulary(), token_budget=512)


def test_training_batches_and_what_is_built_on_them_carry_the_setting():
    pipeline = _pipeline()
    for repeat in (False, True):
        batches = pipeline.dataset(seed=1, repeat=repeat)
        assert batches.options().autotune.enabled is False
        assert batches.options().deterministic is True  # the pipeline's own options kept
        assert batches.prefetch(2).options().autotune.enabled is False  # inherited downstream


def test_the_report_pass_runs_without_the_thread(monkeypatch):
    seen = []
    reduce = tf.data.Dataset.reduce

    def recording_reduce(dataset, *args, **kwargs):
        seen.append(dataset.options().autotune.enabled)
        return reduce(dataset, *args, **kwargs)

    monkeypatch.setattr(tf.data.Dataset, "reduce", recording_reduce)
    report = _pipeline().report()
    assert report.pairs_read == 1014  # multi30k val
    assert seen == [False]


def test_the_feed_that_fit_reads_carries_the_setting():
    feed = CheckpointableFeed(tf.data.Dataset.range(4).map(lambda i: ((i,),)))
    dataset = feed.dataset()
    assert dataset.options().autotune.enabled is False
    assert [int(e[0][0]) for e in dataset.take(3)] == [0, 1, 2]
