"""The end-to-end tf.data pipeline: text pairs in, model-ready token-budget batches out.

    corpora -> shuffle -> (repeat) -> tokenize (parallel, batched) -> filter empty/too long
            -> add bos/eos -> bucket by length, batch by tokens -> prefetch

Each element is `({"source_ids": [B, S], "target_ids": [B, T]}, labels [B, T])`, int32, padded
with the vocabulary's pad id (0 for a `SubwordVocabulary`), where for a pair with subword pieces
`x` (source) and `y` (target), and the vocabulary's bos and eos ids:

    source_ids = x + [eos]          the encoder input
    target_ids = [bos] + y          the decoder input: the target shifted right
    labels     = y + [eos]          what the decoder predicts at each position

`max_length` bounds `len(source_ids)` and `len(labels)` (pieces + 1). Pairs with an empty side
or a side over `max_length` are left out and counted in the `PipelineReport`, which
`make_dataset` logs; nothing is dropped silently.

Each side is tokenized by the vocabulary's own model for it: one SentencePiece model for both
with a `SubwordVocabulary`, `source.spm` and `target.spm` with an imported model's
`MarianVocabulary` (whose decoder starts from its pad id).
"""

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from keras_transformer.data import batching
from keras_transformer.data.corpora import ParallelCorpus, check_corpora
from keras_transformer.data.options import without_autotune_thread
from keras_transformer.data.vocabulary import BOS_ID, EOS_ID, load_vocabulary
from keras_transformer.errors import UserInputError

logger = logging.getLogger(__name__)

# Lines tokenized per call of the SentencePiece op: one op call per line would be slower.
_TOKENIZE_BATCH = 512
_REPORT_BATCH = 4096
_CACHE_FORMAT = 1


@dataclasses.dataclass(frozen=True)
class PipelineReport:
    """What one epoch of the pipeline holds, counted before training.

    Args:
        pairs_read: pairs read from the corpora (after skipped bad lines).
        pairs_kept: pairs that reach the batches.
        dropped_empty: pairs left out because a side has no subword pieces (an empty line).
        dropped_too_long: pairs left out because a side exceeds `max_length`.
        skipped_bad_lines: pairs the corpora skipped as bad input (`on_bad_line="skip"`).
        source_tokens: tokens of kept pairs on the source side (with eos, without padding).
        target_tokens: tokens of kept pairs on the target side (with eos, without padding).
        bucket_counts: kept pairs per bucket.
        bucket_batch_sizes: global batch size per bucket.
        batches_per_epoch: batches in one epoch without repeat; with repeat, a good
            `steps_per_epoch` for one pass over the data.

    Example:
        >>> report = TranslationPipeline(corpora, vocabulary).report()  # doctest: +SKIP
        >>> print(report.summary())  # doctest: +SKIP
        29000 of 29000 pairs kept (0 with an empty side, 0 over max_length left out; ...
    """

    pairs_read: int
    pairs_kept: int
    dropped_empty: int
    dropped_too_long: int
    skipped_bad_lines: int
    source_tokens: int
    target_tokens: int
    bucket_counts: tuple
    bucket_batch_sizes: tuple
    batches_per_epoch: int

    def summary(self) -> str:
        """One line for logs."""
        return (
            f"{self.pairs_kept} of {self.pairs_read} pairs kept ({self.dropped_empty} with an "
            f"empty side, {self.dropped_too_long} over max_length left out; "
            f"{self.skipped_bad_lines} bad lines skipped); {self.source_tokens} source and "
            f"{self.target_tokens} target tokens; {self.batches_per_epoch} batches per epoch"
        )


def _sum(values):
    return tf.reduce_sum(tf.cast(values, tf.int64))


def num_replicas_in_sync(strategy: tf.distribute.Strategy = None) -> int:
    """Replicas of `strategy` (default: the current one, 1 outside any strategy scope).

    Example:
        >>> num_replicas_in_sync()
        1
    """
    strategy = strategy or tf.distribute.get_strategy()
    return int(strategy.num_replicas_in_sync)


def add_special_ids(source_pieces, target_pieces, bos_id=BOS_ID, eos_id=EOS_ID):
    """Model inputs and labels of one pair of piece sequences (see module docstring).

    Args:
        source_pieces: 1-D int32 subword ids of the source, without bos/eos.
        target_pieces: 1-D int32 subword ids of the target, without bos/eos.
        bos_id: the decoder's start token (the vocabulary's `bos_id`).
        eos_id: the end token (the vocabulary's `eos_id`).

    Returns:
        A dict of 1-D int32 tensors `source_ids`, `target_ids`, `labels`.

    Example:
        >>> element = add_special_ids(tf.constant([7, 8]), tf.constant([9]))
        >>> [element[k].numpy().tolist() for k in ("source_ids", "target_ids", "labels")]
        [[7, 8, 3], [2, 9], [9, 3]]
    """
    eos = tf.constant([eos_id], tf.int32)
    bos = tf.constant([bos_id], tf.int32)
    return {
        "source_ids": tf.concat([source_pieces, eos], axis=0),
        "target_ids": tf.concat([bos, target_pieces], axis=0),
        "labels": tf.concat([target_pieces, eos], axis=0),
    }


def vocabulary_digest(vocabulary) -> bytes:
    """A SHA-256 digest of a vocabulary's files, for cache keys: a `SubwordVocabulary`'s is its
    model's digest (as caches written before imported vocabularies were keyed)."""
    if not hasattr(vocabulary, "files"):
        return hashlib.sha256(vocabulary.model_proto).digest()
    digest = hashlib.sha256()
    for name, content in sorted(vocabulary.files().items()):
        digest.update(f"{name}:{hashlib.sha256(content).hexdigest()};".encode())
    return digest.digest()


def to_model_inputs(batch):
    """Splits a batch dict into the `(inputs, labels)` pair that `model.fit` expects."""
    return {"source_ids": batch["source_ids"], "target_ids": batch["target_ids"]}, batch["labels"]


class TranslationPipeline:
    """Sentence pairs of one or more corpora as token-budget batches for `model.fit`.

    Args:
        corpora: one `ParallelCorpus` or a list of them (mixed by their weights).
        vocabulary: the `SubwordVocabulary` (or the path of its `.model` file), or the
            `MarianVocabulary` of an imported model (or its run folder).
        token_budget: most tokens per batch per replica, per side (source and target),
            padding included. The paper's 25000 per batch over 8 GPUs is about 3125 per replica.
        max_length: longest `source_ids`/`labels` kept (subword pieces + 1).
        num_replicas: replicas in sync (`strategy.num_replicas_in_sync`); global batches hold
            a multiple of this many pairs.
        boundaries: bucket boundaries (default: tensor2tensor's, from 8 growing by x1.1).
        pad_to_bucket_boundary: pad to the bucket's longest length (static shapes) instead of
            the batch's.
        shuffle_buffer: pairs in the shuffle buffer, per corpus.
        cache_dir: if set, each corpus is tokenized once and saved there (`Dataset.save`);
            later runs with the same corpus files and vocabulary read the tokens back.
        log_report: `dataset()` first counts one epoch (`report()`, one tokenizing pass, read
            from the cache when there is one) and logs what the filters leave out, so that
            nothing is dropped silently. Set False to skip that pass.

    Example:
        >>> pipeline = TranslationPipeline(  # doctest: +SKIP
        ...     TextPairCorpus("train.en.gz", "train.de.gz"), "vocab/ende.model",
        ...     token_budget=4096, max_length=256)
        >>> print(pipeline.report().summary())  # doctest: +SKIP
        >>> model.fit(pipeline.dataset(seed=1, repeat=True),  # doctest: +SKIP
        ...           steps_per_epoch=pipeline.report().batches_per_epoch)
    """

    def __init__(
        self,
        corpora,
        vocabulary,
        *,
        token_budget: int = 4096,
        max_length: int = 256,
        num_replicas: int = 1,
        boundaries: Sequence[int] = None,
        pad_to_bucket_boundary: bool = False,
        shuffle_buffer: int = 100_000,
        cache_dir: str = None,
        log_report: bool = True,
    ):
        self.corpora = [corpora] if isinstance(corpora, ParallelCorpus) else list(corpora)
        self.vocabulary = load_vocabulary(vocabulary)
        self.token_budget = int(token_budget)
        self.max_length = int(max_length)
        self.num_replicas = int(num_replicas)
        self.boundaries = list(boundaries or batching.bucket_boundaries(self.max_length))
        # Validates the budget against max_length now, not at the first batch.
        self.batch_sizes = batching.bucket_batch_sizes(
            self.boundaries, self.token_budget, self.num_replicas
        )
        self.pad_to_bucket_boundary = pad_to_bucket_boundary
        self.shuffle_buffer = int(shuffle_buffer)
        self.cache_dir = cache_dir
        self.log_report = log_report
        self._checks = None
        self._report = None
        self._report_logged = False

    # -- reading and tokenizing -------------------------------------------------------------

    def check(self) -> list:
        """Checks every corpus (missing files, mismatched or empty corpora, non-UTF-8 lines)."""
        if self._checks is None:
            self._checks = check_corpora(self.corpora)
        return self._checks

    def _tokenize_batches(self, dataset, batch_size=_TOKENIZE_BATCH):
        """(source, target) strings -> batches of pieces: two int32 `RaggedTensor`s [B, None].

        Tokenizing (and later filtering) whole batches costs one op call per batch; the
        per-element overhead of tf.data would otherwise dominate on a few CPU cores.
        """
        vocabulary = self.vocabulary

        def tokenize(sources, targets):
            # Made inside the map function: see SubwordVocabulary.make_tokenizer.
            tokenizer = vocabulary.make_graph_tokenizer()
            return tokenizer.tokenize_source(sources), tokenizer.tokenize_target(targets)

        return dataset.batch(batch_size).map(
            tokenize, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        )

    def _cache_path(self, corpus):
        identity = hashlib.sha256()
        identity.update(vocabulary_digest(self.vocabulary))
        for name, value in sorted(vars(corpus).items()):
            if name.startswith("_"):
                continue
            identity.update(f"{name}={value!r};".encode())
            if isinstance(value, str) and os.path.isfile(value):
                # Size and modification time: a changed file gets a new cache entry.
                status = os.stat(value)
                identity.update(f"{status.st_size}:{status.st_mtime_ns};".encode())
        identity.update(f"format={_CACHE_FORMAT}".encode())
        safe_name = "".join(c if c.isalnum() or c in "-_." else "_" for c in corpus.name)
        return os.path.join(self.cache_dir, f"{safe_name}-{identity.hexdigest()[:16]}")

    def _cached_pieces(self, corpus):
        """One corpus's pairs as pieces (1-D int32 each), in file order, tokenized once."""
        path = self._cache_path(corpus)
        if not os.path.exists(os.path.join(path, "complete")):
            logger.info("tokenizing corpus %r once into %s", corpus.name, path)
            self._tokenize_batches(corpus.to_dataset()).unbatch().save(path)
            # Written last: a run stopped mid-save leaves no marker and is redone.
            with open(os.path.join(path, "complete"), "w") as marker:
                marker.write("ok\n")
        return tf.data.Dataset.load(path)

    def _piece_batches(self, *, shuffle: bool, repeat: bool, seed, batch_size=_TOKENIZE_BATCH):
        """The pairs of all corpora as ragged batches of pieces, shuffled, repeated and mixed.

        Pairs are shuffled and mixed one by one, then tokenized (or, from a cache, grouped) in
        batches. Without a cache, text is shuffled: strings are cheaper to hold than ids.
        """
        self.check()
        datasets = []
        for index, corpus in enumerate(self.corpora):
            dataset = self._cached_pieces(corpus) if self.cache_dir else corpus.to_dataset()
            if shuffle and self.shuffle_buffer > 1:
                # One seed per corpus, derived from the one seed: reproducible and independent.
                corpus_seed = None if seed is None else int(seed) * 7919 + index
                dataset = dataset.shuffle(
                    self.shuffle_buffer, seed=corpus_seed, reshuffle_each_iteration=True
                )
            if repeat:
                dataset = dataset.repeat()
            datasets.append(dataset)
        if len(datasets) == 1:
            pairs = datasets[0]
        else:
            weights = np.array([corpus.weight for corpus in self.corpora], dtype=np.float64)
            pairs = tf.data.Dataset.sample_from_datasets(
                datasets,
                weights=(weights / weights.sum()).tolist(),
                seed=seed,
                stop_on_empty_dataset=False,
            )
        if self.cache_dir:
            return pairs.ragged_batch(batch_size)
        return self._tokenize_batches(pairs, batch_size)

    def _model_pairs(self, sources, targets):
        """Filters a batch of piece pairs and adds bos/eos: ragged `add_special_ids`."""
        source_lengths, target_lengths = sources.row_lengths(), targets.row_lengths()
        max_pieces = tf.constant(self.max_length - 1, source_lengths.dtype)  # + 1 for eos
        keep = (
            (source_lengths > 0)
            & (target_lengths > 0)
            & (source_lengths <= max_pieces)
            & (target_lengths <= max_pieces)
        )
        sources = tf.ragged.boolean_mask(sources, keep)
        targets = tf.ragged.boolean_mask(targets, keep)
        rows = tf.shape(sources.row_lengths())[0]
        eos_id, bos_id = self.vocabulary.eos_id, self.vocabulary.bos_id
        eos = tf.RaggedTensor.from_tensor(tf.fill([rows, 1], tf.constant(eos_id, tf.int32)))
        bos = tf.RaggedTensor.from_tensor(tf.fill([rows, 1], tf.constant(bos_id, tf.int32)))
        return {
            "source_ids": tf.concat([sources, eos], axis=1),
            "target_ids": tf.concat([bos, targets], axis=1),
            "labels": tf.concat([targets, eos], axis=1),
        }

    # -- the report -------------------------------------------------------------------------

    def report(self) -> PipelineReport:
        """Counts one epoch: pairs kept and dropped, tokens, batches (one tokenizing pass).

        With `cache_dir`, the pass writes the cache and later calls read it back.
        """
        if self._report is not None:
            return self._report
        checks = self.check()
        boundaries = tf.constant(self.boundaries, tf.int32)
        num_buckets = len(self.boundaries) + 1
        max_length = self.max_length

        def count(batch_sources, batch_targets):
            source_lengths = batch_sources.row_lengths()
            target_lengths = batch_targets.row_lengths()
            source_lengths = tf.cast(source_lengths, tf.int32)
            target_lengths = tf.cast(target_lengths, tf.int32)
            empty = tf.logical_or(source_lengths == 0, target_lengths == 0)
            too_long = tf.logical_and(
                tf.logical_not(empty),
                tf.logical_or(source_lengths + 1 > max_length, target_lengths + 1 > max_length),
            )
            kept = tf.logical_not(tf.logical_or(empty, too_long))
            lengths = tf.maximum(source_lengths, target_lengths) + 1
            # bucket_by_sequence_length puts length L in the first bucket whose boundary > L.
            buckets = tf.searchsorted(boundaries, tf.boolean_mask(lengths, kept), side="right")
            return {
                "read": tf.size(empty, out_type=tf.int64),
                "empty": _sum(empty),
                "too_long": _sum(too_long),
                "source_tokens": _sum(tf.boolean_mask(source_lengths + 1, kept)),
                "target_tokens": _sum(tf.boolean_mask(target_lengths + 1, kept)),
                "buckets": tf.math.bincount(
                    buckets, minlength=num_buckets, maxlength=num_buckets, dtype=tf.int64
                ),
            }

        # All corpora once, unshuffled: counts do not depend on order.
        batches = None
        for corpus in self.corpora:
            if self.cache_dir:
                corpus_batches = self._cached_pieces(corpus).ragged_batch(_REPORT_BATCH)
            else:
                corpus_batches = self._tokenize_batches(corpus.to_dataset(), _REPORT_BATCH)
            batches = corpus_batches if batches is None else batches.concatenate(corpus_batches)
        counts = batches.map(count, num_parallel_calls=tf.data.AUTOTUNE)
        counts = without_autotune_thread(counts).reduce(
            {
                "read": tf.constant(0, tf.int64),
                "empty": tf.constant(0, tf.int64),
                "too_long": tf.constant(0, tf.int64),
                "source_tokens": tf.constant(0, tf.int64),
                "target_tokens": tf.constant(0, tf.int64),
                "buckets": tf.zeros([num_buckets], tf.int64),
            },
            lambda total, part: {key: total[key] + part[key] for key in total},
        )
        counts = {key: value.numpy() for key, value in counts.items()}
        bucket_counts = tuple(int(n) for n in counts["buckets"])
        batches = sum(-(-n // size) for n, size in zip(bucket_counts, self.batch_sizes))
        self._report = PipelineReport(
            pairs_read=int(counts["read"]),
            pairs_kept=int(sum(bucket_counts)),
            dropped_empty=int(counts["empty"]),
            dropped_too_long=int(counts["too_long"]),
            skipped_bad_lines=sum(len(check.skipped_lines) for check in checks),
            source_tokens=int(counts["source_tokens"]),
            target_tokens=int(counts["target_tokens"]),
            bucket_counts=bucket_counts,
            bucket_batch_sizes=tuple(self.batch_sizes),
            batches_per_epoch=int(batches),
        )
        if self._report.pairs_kept == 0:
            raise UserInputError(
                f"no pair of corpora {[c.name for c in self.corpora]} survives the filters: "
                f"{self._report.summary()}; raise max_length ({self.max_length}) or check "
                "the files"
            )
        return self._report

    # -- the dataset ------------------------------------------------------------------------

    def dataset(self, *, seed=None, shuffle: bool = True, repeat: bool = False) -> tf.data.Dataset:
        """The batches: `({"source_ids", "target_ids"}, labels)`, int32, padded with the
        vocabulary's pad id.

        Args:
            seed: seed of shuffling and corpus sampling; the same seed gives the same batches.
            shuffle: shuffle pairs (within `shuffle_buffer`) before bucketing.
            repeat: repeat forever (training: then every batch is full and splits evenly across
                replicas); without repeat, one epoch in which every kept pair appears once.

        Example:
            >>> for inputs, labels in pipeline.dataset(seed=1).take(1):  # doctest: +SKIP
            ...     print(inputs["source_ids"].shape, labels.shape)
        """
        if self.log_report and not self._report_logged:
            report = self.report()
            logger.info("data: %s", report.summary())
            if report.dropped_empty or report.dropped_too_long:
                logger.warning(
                    "data: left out %d pairs with an empty side and %d pairs longer than "
                    "max_length=%d",
                    report.dropped_empty,
                    report.dropped_too_long,
                    self.max_length,
                )
            self._report_logged = True
        if self.num_replicas > 1 and not repeat:
            # Keras builds the model from the first batch split across replicas and fails on an
            # uneven split. Full batches (multiples of num_replicas) come before the partial
            # ones that end an epoch, so the first batch is even if any bucket fills once.
            report = self.report()
            if not any(n >= size for n, size in zip(report.bucket_counts, self.batch_sizes)):
                raise UserInputError(
                    f"one epoch ({report.pairs_kept} pairs) does not fill a single batch at a "
                    f"token budget of {self.token_budget}, so the first batch could not split "
                    f"evenly across {self.num_replicas} replicas; lower the token budget or "
                    "use repeat=True"
                )
        pairs = (
            self._piece_batches(shuffle=shuffle, repeat=repeat, seed=seed)
            .map(self._model_pairs, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
            .unbatch()
        )
        batches = batching.token_budget_batches(
            pairs,
            token_budget=self.token_budget,
            max_length=self.max_length,
            num_replicas=self.num_replicas,
            boundaries=self.boundaries,
            pad_to_bucket_boundary=self.pad_to_bucket_boundary,
            pad_id=self.vocabulary.pad_id,
        )
        batches = batches.map(to_model_inputs).prefetch(tf.data.AUTOTUNE)
        options = tf.data.Options()
        options.deterministic = True
        # Shard by batch, not by file, if a multi-worker strategy distributes this dataset.
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA
        )
        return without_autotune_thread(batches.with_options(options))


def make_dataset(
    corpora,
    vocabulary,
    *,
    token_budget: int = 4096,
    max_length: int = 256,
    seed=None,
    shuffle: bool = True,
    repeat: bool = False,
    strategy: tf.distribute.Strategy = None,
    num_replicas: int = None,
    shuffle_buffer: int = 100_000,
    cache_dir: str = None,
    pad_to_bucket_boundary: bool = False,
) -> tf.data.Dataset:
    """Checks the corpora, logs what the filters leave out, and returns the batches.

    Args:
        corpora: one `ParallelCorpus` or a list of them.
        vocabulary: a `SubwordVocabulary` or the path of its `.model` file, or a
            `MarianVocabulary` (or an imported model's run folder).
        token_budget: most tokens per batch per replica, per side, padding included.
        max_length: longest `source_ids`/`labels` kept (subword pieces + 1).
        seed: seed for a deterministic order.
        shuffle: shuffle pairs before bucketing.
        repeat: repeat forever (training) instead of one epoch.
        strategy: a `tf.distribute.Strategy`; its replica count sets `num_replicas`
            (default: the strategy in scope).
        num_replicas: replicas in sync, when no strategy object is at hand.
        shuffle_buffer: pairs in the shuffle buffer, per corpus.
        cache_dir: tokenize each corpus once into this folder and reuse it.
        pad_to_bucket_boundary: static shapes per bucket (XLA) instead of per batch.

    Returns:
        A `tf.data.Dataset` of `({"source_ids": [B, S], "target_ids": [B, T]}, labels [B, T])`.

    Raises:
        UserInputError: on bad corpora or settings, before any training starts.

    Example:
        >>> from keras_transformer.data import TextPairCorpus, make_dataset
        >>> dataset = make_dataset(  # doctest: +SKIP
        ...     TextPairCorpus("train.en.gz", "train.de.gz"), "vocab/ende.model",
        ...     token_budget=4096, seed=1, repeat=True)
        >>> model.fit(dataset, steps_per_epoch=1000)  # doctest: +SKIP
    """
    if num_replicas is None:
        num_replicas = num_replicas_in_sync(strategy)
    pipeline = TranslationPipeline(
        corpora,
        vocabulary,
        token_budget=token_budget,
        max_length=max_length,
        num_replicas=num_replicas,
        pad_to_bucket_boundary=pad_to_bucket_boundary,
        shuffle_buffer=shuffle_buffer,
        cache_dir=cache_dir,
    )
    pipeline.check()
    # dataset() logs the report: pairs kept, and those left out by the filters.
    return pipeline.dataset(seed=seed, shuffle=shuffle, repeat=repeat)


def write_report(report: PipelineReport, path: str) -> None:
    """Writes a report as JSON (for run folders and benchmarks)."""
    with open(path, "w", encoding="utf-8") as file:
        json.dump(dataclasses.asdict(report), file, indent=2)
