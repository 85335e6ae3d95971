"""OutputDir: the run-folder layout."""

import os

import pytest

from keras_transformer.errors import UserInputError
from keras_transformer.runs.layout import OutputDir


def test_layout(tmp_path):
    run = OutputDir(tmp_path / "run")
    assert run.model_config == os.path.join(run.path, "config.json")
    assert run.vocabulary == os.path.join(run.path, "vocab.model")
    assert run.checkpoint_dir == os.path.join(run.path, "checkpoints")
    assert run.final_model.endswith("model.keras")
    run.prepare()
    assert os.path.isdir(run.checkpoint_dir)
    assert run.translation_model == run.final_model
    open(run.averaged_model, "w").close()
    assert run.translation_model == run.averaged_model


def test_prepare_rejects_unwritable_folder(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UserInputError, match=r"output_dir .* is not writable"):
        OutputDir(blocker / "run").prepare()
