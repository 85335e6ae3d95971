"""Shared helpers of the parsing tests: the shared treebank files, read once per test
process, and a parsing run folder with an untrained tiny model."""

import functools

import pytest

from keras_transformer.parsing.trees import read_preprocessed

SHARED_TREE_FILES = [
    "treebank/wsj_sample.train.trees",
    "treebank/wsj_sample.dev.trees",
    "gum/gum_const.train.trees",
    "gum/gum_const.dev.trees",
]


@functools.cache
def _read(path):
    return tuple(read_preprocessed(path))


def shared_trees(data_dir, name):
    """`(path, preprocessed trees)` of a shared tree file (read once); skips when absent.
    The trees are shared between tests: do not change them."""
    path = data_dir / name
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return path, _read(str(path))


def untrained_parser_run(folder):
    """A run folder with an untrained tiny model, its parsing vocabulary and parsing.json:
    its outputs are arbitrary, which is what the repair has to cope with."""
    from keras_transformer.config import TransformerConfig
    from keras_transformer.model import build_model
    from keras_transformer.parsing.corpus import train_parsing_vocabulary, write_parallel
    from keras_transformer.parsing.linearization import Linearizer
    from keras_transformer.parsing.parser import write_parsing_settings
    from keras_transformer.parsing.trees import parse_tree
    from keras_transformer.runs.models import atomic_save_model

    folder.mkdir()
    trees = [
        parse_tree(f"(TOP (S (NP (PRP {w})) (VP (VBZ {v}) (RB n't)) (. .)))")
        for w in ("He", "She", "It")
        for v in ("does", "is", "was", "ca")
    ]
    source, target = write_parallel(trees, Linearizer(), str(folder / "corpus"))
    _, size = train_parsing_vocabulary([source], [target], str(folder / "vocab.model"), 320)
    config = TransformerConfig.from_preset(
        "base",
        vocab_size=size,
        num_layers=1,
        d_model=32,
        d_ff=64,
        num_heads=4,
        key_dim=8,
        value_dim=8,
        max_length=64,
    )
    atomic_save_model(build_model(config), str(folder / "model.keras"))
    write_parsing_settings(str(folder), Linearizer())
    return folder
