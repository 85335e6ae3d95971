"""Shared helpers of the parsing tests: the shared treebank files, read once per session."""

import functools

import pytest

from keras_transformer.parsing.trees import read_preprocessed

SHARED_TREE_FILES = ["treebank/wsj_sample.train.trees", "treebank/wsj_sample.dev.trees",
                     "gum/gum_const.train.trees", "gum/gum_const.dev.trees"]


@functools.lru_cache(maxsize=None)
def _read(path):
    return tuple(read_preprocessed(path))


def shared_trees(data_dir, name):
    """`(path, preprocessed trees)` of a shared tree file (read once); skips when absent.
    The trees are shared between tests: do not change them."""
    path = data_dir / name
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return path, _read(str(path))
