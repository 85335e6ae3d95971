"""The inputs of a training run: its corpora, its vocabulary, and the batches `fit` reads,
with the data position a resumed run continues from.

Data position. Without a distribution strategy the data iterator itself is saved in every
checkpoint and restored into the iterator `fit` makes. Under a strategy on one host (whose own
iterators cannot be checkpointed) a `CheckpointableFeed` reads the batches with a host iterator
that checkpoints hold. Either way a restart costs what reading one checkpoint costs. Across
workers, or from a checkpoint without the iterator, the same seed replays the same batches, so
skipping the micro-batches already trained on resumes exactly where the checkpoint was
written, at the cost of re-reading them.

Example:
    >>> vocabulary = prepare_vocabulary(config, OutputDir(config.output_dir), chief=True)  # doctest: +SKIP
"""

import filecmp
import logging
import os
import time

import tensorflow as tf

from keras_transformer import data
from keras_transformer.data.marian_vocabulary import MarianVocabulary, is_marian_folder
from keras_transformer.errors import UserInputError
from keras_transformer.files import atomic_copy
from keras_transformer.runs.checkpoints import has_data_feed, has_data_iterator
from keras_transformer.runs.decoding import DECODING_FILE
from keras_transformer.training.accumulation import group_micro_batches
from keras_transformer.training.distributed_feed import CheckpointableFeed
from keras_transformer.training.training_model import read_value

logger = logging.getLogger(__name__)


def corpora(files):
    """The `TextPairCorpus` or `TfdsCorpus` of each `CorpusFiles` of the config."""
    found = []
    for corpus in files:
        if corpus.tfds is not None:
            found.append(
                data.TfdsCorpus(
                    corpus.tfds,
                    corpus.source,
                    corpus.target,
                    split=corpus.split,
                    weight=corpus.weight,
                )
            )
        else:
            found.append(
                data.TextPairCorpus(
                    corpus.source,
                    corpus.target,
                    weight=corpus.weight,
                    on_bad_line=corpus.on_bad_line,
                )
            )
    return found


def prepare_vocabulary(config, run, chief, init=None):
    """The run's vocabulary: the given `.model` (copied into the run), the run's own from an
    earlier start, or one trained now on the training corpora; for a run tuning an imported
    model, that model's `MarianVocabulary` (its files and decoding.json copied into the run)."""
    settings = config.data
    if settings.vocab is None and init is not None and init.get("imported"):
        vocabulary = MarianVocabulary.from_folder(init["run"])
        if chief:
            vocabulary.write(run.path)
            decoding = os.path.join(init["run"], DECODING_FILE)
            if os.path.isfile(decoding):
                atomic_copy(decoding, os.path.join(run.path, DECODING_FILE))
        return vocabulary
    if settings.vocab is None and is_marian_folder(run.path):
        return MarianVocabulary.from_folder(run.path)
    if settings.vocab is not None:
        if chief:
            if not os.path.exists(run.vocabulary):
                atomic_copy(settings.vocab, run.vocabulary)
            elif not filecmp.cmp(settings.vocab, run.vocabulary, shallow=False):
                raise UserInputError(
                    f"data.vocab {settings.vocab!r} differs from {run.vocabulary!r}, the "
                    "vocabulary this run was started with; use that one, or a new output_dir"
                )
        return data.SubwordVocabulary.from_file(settings.vocab)
    if os.path.exists(run.vocabulary):
        return data.SubwordVocabulary.from_file(run.vocabulary)
    prefix = os.path.join(run.path, ".vocab-training")
    logger.info(
        "training a %d-piece %s vocabulary into %s",
        settings.vocab_size,
        settings.vocab_model_type,
        run.vocabulary,
    )
    data.train_vocabulary(
        corpora(settings.train),
        prefix,
        vocab_size=settings.vocab_size,
        model_type=settings.vocab_model_type,
        seed=settings.seed,
    )
    os.replace(prefix + ".vocab", os.path.splitext(run.vocabulary)[0] + ".vocab")
    os.replace(prefix + ".model", run.vocabulary)
    return data.SubwordVocabulary.from_file(run.vocabulary)


def training_batches(config, vocabulary, strategy, model, checkpointer, accumulation_steps):
    """The batches `fit` trains on, from the data position of the restored checkpoint (see
    the module docstring), and the callbacks that keep that position (none, or a
    `CheckpointableFeed`'s, which must come before the checkpoint callback)."""
    settings = config.data
    pipeline = data.TranslationPipeline(
        corpora(settings.train),
        vocabulary,
        token_budget=settings.token_budget,
        max_length=settings.max_length,
        num_replicas=strategy.num_replicas_in_sync,
        shuffle_buffer=settings.shuffle_buffer,
        cache_dir=settings.cache_dir,
        pad_to_bucket_boundary=settings.pad_to_bucket_boundary,
    )
    batches = pipeline.dataset(seed=settings.seed, shuffle=True, repeat=True)
    consumed = int(read_value(model.micro_batches_seen))
    mode = data_position_mode(strategy, consumed, checkpointer.restored_path)
    if mode == "iterator":
        model.on_train_iterator = lambda iterator: _attach_iterator(checkpointer, iterator)
    elif mode == "replay" and consumed:
        logger.info("skipping the %d micro-batches trained on before (data position)", consumed)
        batches = batches.skip(consumed)
    train_data = group_micro_batches(batches, accumulation_steps).prefetch(tf.data.AUTOTUNE)
    if mode != "feed":
        return train_data, []
    feed = CheckpointableFeed(train_data)
    _attach_iterator(checkpointer, feed.trackable, on_restore=feed.restore_pending)
    checkpointer.save_guard = feed.saving
    return feed.dataset(), [feed.callback()]


def dev_batches(config, vocabulary, num_replicas):
    """The dev set's batches, read once per evaluation, or None without `data.dev`."""
    settings = config.data
    if settings.dev is None:
        return None
    # One global budget for all replicas, split by tf.distribute as evenly as it can:
    # the dev set is read once, so its batches need not divide by the replica count.
    dev_pipeline = data.TranslationPipeline(
        corpora([settings.dev]),
        vocabulary,
        token_budget=settings.token_budget * num_replicas,
        max_length=settings.max_length,
        num_replicas=1,
        shuffle_buffer=1,
    )
    dev_data = dev_pipeline.dataset(shuffle=False, repeat=False)
    # A known length keeps Keras from warning that the dev set "ran out of data".
    count = int(dev_data.reduce(0, lambda count, _: count + 1).numpy())
    return dev_data.apply(tf.data.experimental.assert_cardinality(count))


def dev_sentences(config):
    """The first `dev_bleu.sentences` (source, reference) texts of `data.dev`, as two lists."""
    dev, wanted = config.data.dev, config.dev_bleu.sentences
    sources, references = [], []
    for source, reference in zip(data.read_lines(dev.source), data.read_lines(dev.target)):
        if len(sources) == wanted:
            break
        sources.append(source.decode("utf-8", errors="replace"))
        references.append(reference.decode("utf-8", errors="replace"))
    return sources, references


def data_position_mode(strategy, consumed, restored):
    """How this start keeps the data position (see the module docstring): "iterator" (fit's
    own, under the default strategy), "feed" (a `CheckpointableFeed`, under a strategy on one
    host) or "replay" (across workers, or from a checkpoint written without either)."""
    default = strategy is tf.distribute.get_strategy() and not tf.distribute.has_strategy()
    # tf.distribute's iterators have no checkpoint support; a multi-worker run's workers each
    # read their own share of the data, which one host iterator cannot give them.
    feedable = not default and not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
    if consumed and restored is not None:
        if default and has_data_iterator(restored) and not has_data_feed(restored):
            return "iterator"
        if feedable and has_data_feed(restored):
            return "feed"
        return "replay"
    return "iterator" if default else "feed" if feedable else "replay"


def _attach_iterator(checkpointer, iterator, on_restore=None):
    if not isinstance(iterator, (tf.data.Iterator, tf.train.Checkpoint)):
        return
    started = time.monotonic()
    try:
        restored = checkpointer.attach_data_iterator(iterator)
    except tf.errors.OpError as error:
        raise UserInputError(
            f"the data position saved in {checkpointer.restored_path} does not fit this "
            f"run's data settings ({type(error).__name__}: {str(error).splitlines()[0][:200]});"
            " the data section of the config changed since it was written: restore it, or "
            "use a new output_dir"
        ) from None
    if restored:
        if on_restore is not None:
            on_restore()
        logger.info(
            "restored the data position from %s in %.1f s",
            checkpointer.restored_path,
            time.monotonic() - started,
        )
