"""Parallel corpora: where the sentence pairs of paper section 5.1 come from.

A corpus is a source of aligned (source sentence, target sentence) pairs. Three kinds are read:

- `TextPairCorpus`: two line-aligned plain-text files, optionally gzipped (`train.en.gz`,
  `train.de.gz`); line i of one is the translation of line i of the other.
- `TsvCorpus`: one tab-separated file with the source and the target in two columns.
- `TfdsCorpus`: a TensorFlow Datasets dataset by name, such as `wmt14_translate/de-en`. TFDS
  downloads and prepares the data on first use, which needs the network and the
  `tensorflow-datasets` package; this reader is deliberately thin (no checks beyond TFDS's own).

Every file-based corpus is checked (`corpus.check()`) before training starts: a missing file, an
empty corpus, a line-count mismatch between source and target, or a line that is not UTF-8 each
raise one `UserInputError` that names the file, the line and what to do. With
`on_bad_line="skip"`, pairs with a non-UTF-8 side are skipped instead, and the check reports how
many and which; nothing is dropped silently.

Several corpora are mixed with sampling weights by `mix_corpora`.
"""

import dataclasses
import gzip
import logging
import os
from collections.abc import Iterator, Sequence

import tensorflow as tf

from keras_transformer.data.options import without_autotune_thread
from keras_transformer.errors import UserInputError, not_utf8_message

logger = logging.getLogger(__name__)

ON_BAD_LINE_CHOICES = ("error", "skip")
_GZIP_MAGIC = b"\x1f\x8b"


@dataclasses.dataclass(frozen=True)
class CorpusCheck:
    """What `ParallelCorpus.check` found in a corpus.

    Args:
        name: the corpus name, for messages.
        num_lines: lines (pairs) in the files, including skipped ones.
        skipped_lines: 1-based line numbers of pairs skipped as bad input (non-UTF-8 text) when
            the corpus reads with `on_bad_line="skip"`; empty otherwise.

    Example:
        >>> check = CorpusCheck("multi30k", num_lines=29000, skipped_lines=())
        >>> check.num_pairs
        29000
    """

    name: str
    num_lines: int
    skipped_lines: tuple = ()

    @property
    def num_pairs(self) -> int:
        """Pairs the corpus yields: lines minus skipped lines."""
        return self.num_lines - len(self.skipped_lines)


class ParallelCorpus:
    """Base class of the corpus readers: a named, weighted source of sentence pairs.

    Subclasses implement `check`, `pairs` and `to_dataset` so that `pairs()` (Python) and
    `to_dataset()` (tf.data) yield the same pairs in the same order.

    Args:
        name: a short name for messages and reports.
        weight: the sampling weight of this corpus when several are mixed (`mix_corpora`).
    """

    def __init__(self, name: str, weight: float = 1.0):
        if not weight > 0:
            raise UserInputError(
                f"corpus {name!r}: sampling weight must be positive, got {weight}; "
                "leave a corpus out instead of giving it weight 0"
            )
        self.name = name
        self.weight = float(weight)

    def check(self) -> CorpusCheck:
        """Reads the whole corpus once and raises `UserInputError` on bad input."""
        raise NotImplementedError

    def pairs(self) -> Iterator[tuple]:
        """Yields (source, target) Python strings, skipping what `check` reports skipped."""
        raise NotImplementedError

    def to_dataset(self) -> tf.data.Dataset:
        """A `tf.data.Dataset` of (source, target) scalar `tf.string` pairs, as `pairs()`."""
        raise NotImplementedError

    def text_lines(self) -> Iterator[str]:
        """Yields source and target sentences alike: the text a shared vocabulary learns from."""
        for source, target in self.pairs():
            yield source
            yield target

    def __repr__(self):
        return f"{type(self).__name__}(name={self.name!r}, weight={self.weight})"


def _check_on_bad_line(on_bad_line):
    if on_bad_line not in ON_BAD_LINE_CHOICES:
        raise UserInputError(
            f"on_bad_line must be one of {ON_BAD_LINE_CHOICES}, got {on_bad_line!r}"
        )


def _require_file(path, role):
    if not os.path.exists(path):
        raise UserInputError(f"{role} file {path!r} does not exist; check the path")
    if os.path.isdir(path):
        raise UserInputError(f"{role} file {path!r} is a directory; give the path of a file")


def is_gzipped(path: str) -> bool:
    """True when the file starts with the gzip magic bytes (whatever its name says).

    Args:
        path: a local file path.

    Example:
        >>> is_gzipped("train.en.gz")  # doctest: +SKIP
        True
    """
    with open(path, "rb") as file:
        return file.read(2) == _GZIP_MAGIC


def _open_binary(path):
    return gzip.open(path, "rb") if is_gzipped(path) else open(path, "rb")


def read_lines(path: str) -> Iterator[bytes]:
    """Yields the lines of a text file (optionally gzipped) as bytes, without line endings.

    Lines split on `\\n` only and a trailing `\\r` is removed, exactly as
    `tf.data.TextLineDataset` reads them, so the Python and tf.data readers always agree.

    Args:
        path: a plain or gzipped text file.

    Example:
        >>> for line in read_lines("train.en.gz"):  # doctest: +SKIP
        ...     print(line.decode("utf-8"))
    """
    try:
        file = _open_binary(path)
    except FileNotFoundError:
        raise UserInputError(f"file {path!r} does not exist; check the path") from None
    with file:
        try:
            for line in file:
                if line.endswith(b"\n"):
                    line = line[:-1]
                if line.endswith(b"\r"):
                    line = line[:-1]
                yield line
        except (OSError, EOFError) as error:  # a truncated or corrupt .gz file
            raise UserInputError(
                f"cannot read {path!r}: {error}; the file looks truncated or corrupt, "
                "download or decompress it again"
            ) from None


def _text_line_dataset(path):
    return tf.data.TextLineDataset(path, compression_type="GZIP" if is_gzipped(path) else "")


def _utf8_error_message(path, line_number, line, error, skip_flag_hint):
    return (
        f"{not_utf8_message(repr(path), line_number, line, error)} or {skip_flag_hint} to "
        "skip such pairs"
    )


_SKIP_HINT = (
    "read the corpus with on_bad_line='skip' (`on_bad_line: skip` on the corpus in a "
    "training config, `--skip-bad-lines` for `keras-transformer vocab`)"
)


def _skip_line_numbers(dataset, skipped_lines):
    """Drops the elements at the given 1-based line numbers from a dataset read in file order."""
    if not skipped_lines:
        return dataset
    skipped = tf.constant(sorted(int(n) - 1 for n in skipped_lines), dtype=tf.int64)

    def keep(index, _element):
        # `skipped` is sorted: one binary search per line, cheap for any number of bad lines.
        position = tf.searchsorted(skipped, tf.reshape(index, [1]))[0]
        found = tf.logical_and(
            position < tf.size(skipped, out_type=tf.int32),
            tf.gather(skipped, tf.minimum(position, tf.size(skipped) - 1)) == index,
        )
        return tf.logical_not(found)

    return dataset.enumerate().filter(keep).map(lambda _index, element: element)


class TextPairCorpus(ParallelCorpus):
    """Two line-aligned text files, one per language, each optionally gzipped.

    Args:
        source_path: the source-language file; gzip is detected from the file's first bytes.
        target_path: the target-language file, line-aligned with `source_path`.
        weight: sampling weight when several corpora are mixed.
        on_bad_line: `"error"` (default) raises on a non-UTF-8 line; `"skip"` skips that pair
            and reports it in `check()` and in the log.
        name: a short name for messages; defaults to the source file name.

    Example:
        >>> corpus = TextPairCorpus(  # doctest: +SKIP
        ...     "multi30k/train.en.gz", "multi30k/train.de.gz")
        >>> corpus.check().num_pairs  # doctest: +SKIP
        29000
        >>> source, target = next(corpus.pairs())  # doctest: +SKIP
    """

    def __init__(self, source_path, target_path, *, weight=1.0, on_bad_line="error", name=None):
        super().__init__(name or os.path.basename(str(source_path)), weight)
        _check_on_bad_line(on_bad_line)
        self.source_path = os.fspath(source_path)
        self.target_path = os.fspath(target_path)
        self.on_bad_line = on_bad_line
        self._check = None

    def check(self) -> CorpusCheck:
        if self._check is not None:
            return self._check
        _require_file(self.source_path, "source")
        _require_file(self.target_path, "target")
        counts = {}
        bad = set()
        for path in (self.source_path, self.target_path):
            count = 0
            for count, line in enumerate(read_lines(path), start=1):
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError as error:
                    if self.on_bad_line == "error":
                        raise UserInputError(
                            _utf8_error_message(path, count, line, error, _SKIP_HINT)
                        ) from None
                    bad.add(count)
            counts[path] = count
        source_lines, target_lines = counts[self.source_path], counts[self.target_path]
        if source_lines != target_lines:
            raise UserInputError(
                f"corpus {self.name!r}: source and target must have the same number of lines "
                f"(line i of one translates line i of the other), but source "
                f"{self.source_path!r} has {source_lines} lines and target "
                f"{self.target_path!r} has {target_lines} lines; check that neither file is "
                "truncated and that no sentence contains a line break"
            )
        if source_lines == 0:
            raise UserInputError(
                f"corpus {self.name!r} is empty: {self.source_path!r} and "
                f"{self.target_path!r} have no lines; check the paths"
            )
        self._check = CorpusCheck(self.name, source_lines, tuple(sorted(bad)))
        if bad:
            logger.warning(
                "corpus %r: skipped %d of %d pairs whose text is not UTF-8 (lines %s%s)",
                self.name,
                len(bad),
                source_lines,
                ", ".join(map(str, sorted(bad)[:10])),
                ", ..." if len(bad) > 10 else "",
            )
        return self._check

    def pairs(self):
        skipped = set(self.check().skipped_lines)
        lines = zip(read_lines(self.source_path), read_lines(self.target_path))
        for number, (source, target) in enumerate(lines, start=1):
            if number not in skipped:
                yield source.decode("utf-8"), target.decode("utf-8")

    def to_dataset(self):
        check = self.check()
        dataset = tf.data.Dataset.zip(
            (_text_line_dataset(self.source_path), _text_line_dataset(self.target_path))
        )
        return _skip_line_numbers(dataset, check.skipped_lines)


class TsvCorpus(ParallelCorpus):
    """One tab-separated file (optionally gzipped) with source and target in two columns.

    Args:
        path: the TSV file; one pair per line, columns separated by a tab.
        source_column: 0-based column of the source sentence.
        target_column: 0-based column of the target sentence.
        skip_header: skip the first line (a header row).
        weight: sampling weight when several corpora are mixed.
        on_bad_line: `"error"` (default) raises on a non-UTF-8 line or a line with too few
            columns; `"skip"` skips such lines and reports them.
        name: a short name for messages; defaults to the file name.

    Example:
        >>> corpus = TsvCorpus("pairs.tsv", source_column=0, target_column=1)  # doctest: +SKIP
        >>> corpus.check().num_pairs  # doctest: +SKIP
        10000
    """

    def __init__(
        self,
        path,
        *,
        source_column=0,
        target_column=1,
        skip_header=False,
        weight=1.0,
        on_bad_line="error",
        name=None,
    ):
        super().__init__(name or os.path.basename(str(path)), weight)
        _check_on_bad_line(on_bad_line)
        if source_column < 0 or target_column < 0 or source_column == target_column:
            raise UserInputError(
                f"TSV corpus {path!r}: source_column ({source_column}) and target_column "
                f"({target_column}) must be two different non-negative column numbers"
            )
        self.path = os.fspath(path)
        self.source_column = source_column
        self.target_column = target_column
        self.skip_header = skip_header
        self.on_bad_line = on_bad_line
        self._check = None

    def check(self) -> CorpusCheck:
        if self._check is not None:
            return self._check
        _require_file(self.path, "TSV")
        needed = max(self.source_column, self.target_column) + 1
        bad = []
        count = 0
        for count, line in enumerate(read_lines(self.path), start=1):
            if self.skip_header and count == 1:
                continue
            problem = None
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as error:
                problem = _utf8_error_message(self.path, count, line, error, _SKIP_HINT)
            else:
                columns = line.count(b"\t") + 1
                if columns < needed:
                    problem = (
                        f"{self.path!r} line {count} has {columns} tab-separated column(s), but "
                        f"column {needed - 1} is needed; fix the line or {_SKIP_HINT} to skip "
                        "such lines"
                    )
            if problem:
                if self.on_bad_line == "error":
                    raise UserInputError(problem)
                bad.append(count)
        num_lines = count - (1 if self.skip_header and count else 0)
        if num_lines == 0:
            raise UserInputError(f"TSV corpus {self.path!r} is empty: it has no pairs")
        # Skipped line numbers are file line numbers; `to_dataset` removes the header first.
        self._check = CorpusCheck(self.name, num_lines, tuple(bad))
        if bad:
            logger.warning(
                "corpus %r: skipped %d of %d lines (non-UTF-8 or too few columns; lines %s%s)",
                self.name,
                len(bad),
                num_lines,
                ", ".join(map(str, bad[:10])),
                ", ..." if len(bad) > 10 else "",
            )
        return self._check

    def pairs(self):
        skipped = set(self.check().skipped_lines)
        for number, line in enumerate(read_lines(self.path), start=1):
            if (self.skip_header and number == 1) or number in skipped:
                continue
            columns = line.decode("utf-8").split("\t")
            yield columns[self.source_column], columns[self.target_column]

    def to_dataset(self):
        check = self.check()
        # Line numbers in `check` are file line numbers, so the header is one more line to skip.
        skipped = check.skipped_lines + ((1,) if self.skip_header else ())
        lines = _skip_line_numbers(_text_line_dataset(self.path), skipped)
        source_column, target_column = self.source_column, self.target_column

        def split(line):
            columns = tf.strings.split(line, "\t")
            return columns[source_column], columns[target_column]

        return lines.map(split, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


class TfdsCorpus(ParallelCorpus):
    """A translation dataset from TensorFlow Datasets, such as `wmt14_translate/de-en`.

    Thin on purpose: TFDS downloads and prepares the data itself on first use (network needed,
    `pip install tensorflow-datasets`), and its checks are TFDS's own. After that, `data_dir`
    holds the prepared files and no network is needed.

    Args:
        name: the TFDS name, e.g. `"wmt14_translate/de-en"`.
        source_language: the feature key of the source, e.g. `"en"`.
        target_language: the feature key of the target, e.g. `"de"`.
        split: the TFDS split, e.g. `"train"`.
        data_dir: where TFDS keeps prepared data (default: TFDS's own default).
        weight: sampling weight when several corpora are mixed.

    Example:
        >>> corpus = TfdsCorpus("wmt14_translate/de-en", "en", "de")  # doctest: +SKIP
    """

    def __init__(
        self, name, source_language, target_language, *, split="train", data_dir=None, weight=1.0
    ):
        super().__init__(f"{name}:{split}", weight)
        self.tfds_name = name
        self.source_language = source_language
        self.target_language = target_language
        self.split = split
        self.data_dir = data_dir

    def _load(self):
        try:
            import tensorflow_datasets as tfds
        except ImportError:
            raise UserInputError(
                f"corpus {self.name!r} needs TensorFlow Datasets: `pip install "
                "tensorflow-datasets` (preparing WMT also needs the network)"
            ) from None
        return tfds.load(
            self.tfds_name, split=self.split, data_dir=self.data_dir, shuffle_files=False
        )

    def check(self) -> CorpusCheck:
        # TFDS validates its own data; counting would mean reading it all, so report the
        # split size from TFDS's metadata instead.
        dataset = self._load()
        return CorpusCheck(self.name, int(dataset.cardinality().numpy()), ())

    def to_dataset(self):
        source, target = self.source_language, self.target_language
        return self._load().map(lambda example: (example[source], example[target]))

    def pairs(self):
        for source, target in without_autotune_thread(self.to_dataset()).as_numpy_iterator():
            yield source.decode("utf-8"), target.decode("utf-8")


def check_corpora(corpora: Sequence[ParallelCorpus]) -> list:
    """Checks every corpus before training starts; returns their `CorpusCheck`s.

    Args:
        corpora: the corpora to check.

    Returns:
        One `CorpusCheck` per corpus, in order.

    Raises:
        UserInputError: on the first bad input found (missing file, empty corpus, line-count
            mismatch, non-UTF-8 text with `on_bad_line="error"`), or when `corpora` is empty.

    Example:
        >>> checks = check_corpora([TextPairCorpus("a.en", "a.de")])  # doctest: +SKIP
    """
    if not corpora:
        raise UserInputError("no corpus given: name at least one source/target pair of files")
    return [corpus.check() for corpus in corpora]


def mix_corpora(
    corpora: Sequence[ParallelCorpus], *, repeat: bool, shuffle_buffer: int = 0, seed=None
) -> tf.data.Dataset:
    """One dataset of (source, target) string pairs drawn from several corpora by weight.

    With `repeat=True` each corpus repeats forever and each pair is drawn from corpus i with
    probability weight_i / sum(weights), so the weights set the corpora's shares of training.
    With `repeat=False` every pair of every corpus appears exactly once (one epoch); the weights
    then only set how the corpora interleave.

    Args:
        corpora: one or more `ParallelCorpus`.
        repeat: repeat each corpus forever (training) or read each once.
        shuffle_buffer: shuffle each corpus's pairs with this buffer (0: keep file order).
        seed: seed for shuffling and sampling; the same seed gives the same order.

    Returns:
        A `tf.data.Dataset` of (source, target) scalar `tf.string` pairs.

    Example:
        >>> pairs = mix_corpora(  # doctest: +SKIP
        ...     [TextPairCorpus("news.en", "news.de", weight=1),
        ...      TextPairCorpus("web.en", "web.de", weight=3)], repeat=True, seed=1)
    """
    check_corpora(corpora)
    datasets = []
    for index, corpus in enumerate(corpora):
        dataset = corpus.to_dataset()
        if shuffle_buffer:
            # A different seed per corpus, derived from the one seed, keeps runs reproducible.
            corpus_seed = None if seed is None else seed * 1000 + index
            dataset = dataset.shuffle(
                shuffle_buffer, seed=corpus_seed, reshuffle_each_iteration=True
            )
        if repeat:
            dataset = dataset.repeat()
        datasets.append(dataset)
    if len(datasets) == 1:
        return datasets[0]
    total = sum(corpus.weight for corpus in corpora)
    return tf.data.Dataset.sample_from_datasets(
        datasets,
        weights=[corpus.weight / total for corpus in corpora],
        seed=seed,
        stop_on_empty_dataset=False,
    )
