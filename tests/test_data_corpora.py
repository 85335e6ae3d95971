"""Tests of keras_transformer.data.corpora: readers, checks of bad input, mixing."""

import collections
import gzip
import hashlib

import pytest

tf = pytest.importorskip("tensorflow")

from keras_transformer.data import corpora  # noqa: E402
from keras_transformer.errors import UserInputError  # noqa: E402
from tests.data_fixtures import multi30k_paths, read_text_lines, shared_data_dir  # noqa: E402


def _checksum(pairs):
    """Order-independent checksum of a multiset of (source, target) pairs."""
    digests = sorted(hashlib.sha256(f"{s}\t{t}".encode()).hexdigest() for s, t in pairs)
    return hashlib.sha256("".join(digests).encode()).hexdigest()


def _dataset_pairs(dataset):
    # Batched: one Python round trip per 1000 pairs, not per pair.
    return [
        (s.decode("utf-8"), t.decode("utf-8"))
        for sources, targets in dataset.batch(1000).as_numpy_iterator()
        for s, t in zip(sources, targets)
    ]


def _write(path, lines, *, gz=False, raw=None):
    data = raw if raw is not None else "".join(line + "\n" for line in lines).encode("utf-8")
    with (gzip.open if gz else open)(path, "wb") as file:
        file.write(data)
    return path


def test_multi30k_gz_pairs_match_raw_files_in_python_and_tf_data():
    source, target = multi30k_paths(shared_data_dir())
    expected = list(zip(read_text_lines(source), read_text_lines(target)))
    assert len(expected) == 29000
    corpus = corpora.TextPairCorpus(source, target)
    check = corpus.check()
    assert (check.num_lines, check.num_pairs, check.skipped_lines) == (29000, 29000, ())
    assert list(corpus.pairs()) == expected
    assert _dataset_pairs(corpus.to_dataset()) == expected


def test_plain_text_and_crlf_and_missing_final_newline(tmp_path):
    source = _write(tmp_path / "a.en", [], raw=b"one\r\ntwo\r\nthree")
    target = _write(tmp_path / "a.de", ["eins", "zwei", "drei"], gz=True)  # gz, odd name
    corpus = corpora.TextPairCorpus(source, target)
    expected = [("one", "eins"), ("two", "zwei"), ("three", "drei")]
    assert corpus.check().num_pairs == 3
    assert list(corpus.pairs()) == expected
    assert _dataset_pairs(corpus.to_dataset()) == expected


def test_tsv_columns_header_and_too_few_columns(tmp_path):
    path = _write(tmp_path / "pairs.tsv", ["id\ten\tde", "1\tHello\tHallo", "2\tCat\tKatze"])
    corpus = corpora.TsvCorpus(path, source_column=1, target_column=2, skip_header=True)
    assert corpus.check().num_pairs == 2
    assert list(corpus.pairs()) == [("Hello", "Hallo"), ("Cat", "Katze")]
    assert _dataset_pairs(corpus.to_dataset()) == [("Hello", "Hallo"), ("Cat", "Katze")]

    bad = _write(tmp_path / "bad.tsv", ["Hello\tHallo", "no tab here", "Cat\tKatze"])
    with pytest.raises(UserInputError, match=r"bad\.tsv' line 2 has 1 tab-separated column"):
        corpora.TsvCorpus(bad).check()
    skipping = corpora.TsvCorpus(bad, on_bad_line="skip")
    assert skipping.check().skipped_lines == (2,)
    assert _dataset_pairs(skipping.to_dataset()) == [("Hello", "Hallo"), ("Cat", "Katze")]
    assert list(skipping.pairs()) == [("Hello", "Hallo"), ("Cat", "Katze")]


def test_line_count_mismatch_names_both_files_and_counts(tmp_path):
    source = _write(tmp_path / "train.en", ["a", "b", "c"])
    target = _write(tmp_path / "train.de", ["a", "b"])
    with pytest.raises(UserInputError) as error:
        corpora.TextPairCorpus(source, target).check()
    message = str(error.value)
    assert str(source) in message and str(target) in message
    assert "3 lines" in message and "2 lines" in message


def test_empty_corpus(tmp_path):
    source = _write(tmp_path / "empty.en", [])
    target = _write(tmp_path / "empty.de", [])
    with pytest.raises(UserInputError, match=r"is empty.*empty\.en.*empty\.de"):
        corpora.TextPairCorpus(source, target).check()
    with pytest.raises(UserInputError, match="no corpus given"):
        corpora.check_corpora([])


def test_missing_file(tmp_path):
    target = _write(tmp_path / "x.de", ["a"])
    with pytest.raises(UserInputError, match=r"source file .*nope\.en' does not exist"):
        corpora.TextPairCorpus(tmp_path / "nope.en", target).check()


def test_non_utf8_line_names_file_and_line_or_is_skipped_and_counted(tmp_path, caplog):
    lines = [b"Hello", b"caf\xe9", b"World"]  # line 2 is Latin-1
    source = _write(tmp_path / "s.en", [], raw=b"\n".join(lines) + b"\n")
    target = _write(tmp_path / "s.de", ["Hallo", "Kaffee", "Welt"])
    with pytest.raises(UserInputError, match=r"s\.en' line 2 is not valid UTF-8.*0xe9"):
        corpora.TextPairCorpus(source, target).check()
    corpus = corpora.TextPairCorpus(source, target, on_bad_line="skip")
    with caplog.at_level("WARNING"):
        check = corpus.check()
    assert check.skipped_lines == (2,) and check.num_pairs == 2
    assert "skipped 1 of 3 pairs" in caplog.text
    assert list(corpus.pairs()) == [("Hello", "Hallo"), ("World", "Welt")]
    assert _dataset_pairs(corpus.to_dataset()) == [("Hello", "Hallo"), ("World", "Welt")]


def test_bad_settings():
    with pytest.raises(UserInputError, match="on_bad_line"):
        corpora.TextPairCorpus("a", "b", on_bad_line="ignore")
    with pytest.raises(UserInputError, match="weight must be positive"):
        corpora.TextPairCorpus("a", "b", weight=0)
    with pytest.raises(UserInputError, match="two different"):
        corpora.TsvCorpus("a.tsv", source_column=1, target_column=1)


def test_mix_one_epoch_has_every_pair_of_every_corpus_once(tmp_path):
    first = corpora.TextPairCorpus(
        _write(tmp_path / "1.en", [f"a{i}" for i in range(50)]),
        _write(tmp_path / "1.de", [f"A{i}" for i in range(50)]),
    )
    second = corpora.TextPairCorpus(
        _write(tmp_path / "2.en", [f"b{i}" for i in range(20)]),
        _write(tmp_path / "2.de", [f"B{i}" for i in range(20)]),
        weight=3,
    )
    pairs = _dataset_pairs(
        corpora.mix_corpora([first, second], repeat=False, shuffle_buffer=100, seed=3)
    )
    assert _checksum(pairs) == _checksum(list(first.pairs()) + list(second.pairs()))
    assert len(pairs) == 70


def test_mix_with_repeat_samples_by_weight(tmp_path):
    first = corpora.TextPairCorpus(
        _write(tmp_path / "1.en", ["a"] * 500), _write(tmp_path / "1.de", ["A"] * 500), weight=1
    )
    second = corpora.TextPairCorpus(
        _write(tmp_path / "2.en", ["b"] * 500), _write(tmp_path / "2.de", ["B"] * 500), weight=3
    )
    mixed = corpora.mix_corpora([first, second], repeat=True, seed=5).take(4000)
    counts = collections.Counter(source for source, _ in _dataset_pairs(mixed))
    # Binomial(4000, 0.75): standard deviation about 27 pairs; 150 is over 5 of them.
    assert abs(counts["b"] - 3000) < 150
    again = corpora.mix_corpora([first, second], repeat=True, seed=5).take(4000)
    assert _dataset_pairs(again) == _dataset_pairs(mixed)
