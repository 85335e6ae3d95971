"""Shared helpers of the data tests (tests/test_data_*.py): real corpora and one small vocabulary.

The vocabulary is trained once per test session (a few seconds) and reused by every data test
module; `pytest.skip` with the reason when KT_DATA_DIR (../shared/data) is absent.
"""

import functools
import gzip
import os
import pathlib
import tempfile

import pytest

# Small enough to train in about a second, large enough to look like a real subword vocabulary.
TEST_VOCAB_SIZE = 4000


def shared_data_dir() -> pathlib.Path:
    """KT_DATA_DIR as a path; skips the calling test when it is unset or missing."""
    location = os.environ.get("KT_DATA_DIR")
    if not location:
        pytest.skip("KT_DATA_DIR is not set: point it at ../shared/data to run the data tests")
    path = pathlib.Path(location)
    if not (path / "multi30k" / "train.en.gz").is_file():
        pytest.skip(f"KT_DATA_DIR={location} has no multi30k/train.en.gz")
    return path


def read_text_lines(path) -> list:
    """Lines of a (gzipped) UTF-8 file, split on \\n only: the reference reader of the tests."""
    path = pathlib.Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as file:
        data = file.read()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [line.decode("utf-8") for line in lines]


def multi30k_paths(data_dir, split="train"):
    return (data_dir / "multi30k" / f"{split}.en.gz", data_dir / "multi30k" / f"{split}.de.gz")


@functools.cache
def _train_multi30k_vocabulary(data_dir: str):
    from keras_transformer.data import TextPairCorpus, train_vocabulary

    source, target = multi30k_paths(pathlib.Path(data_dir))
    prefix = os.path.join(tempfile.mkdtemp(prefix="kt-test-vocab-"), "multi30k")
    return train_vocabulary(
        [TextPairCorpus(source, target)],
        prefix,
        vocab_size=TEST_VOCAB_SIZE,
        model_type="bpe",
        input_sentence_size=30000,
        num_threads=2,
        seed=1,
    )


def multi30k_vocabulary():
    """A BPE vocabulary of TEST_VOCAB_SIZE pieces trained on multi30k train EN+DE, cached."""
    return _train_multi30k_vocabulary(str(shared_data_dir()))
