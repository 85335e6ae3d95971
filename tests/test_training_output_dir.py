"""OutputDir: the run-folder layout, and writes that never leave a half-written file."""

import os

import pytest

from keras_transformer.errors import UserInputError
from keras_transformer.training.output_dir import OutputDir, atomic_write


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


def test_atomic_write_keeps_the_old_file_when_interrupted(tmp_path):
    path = tmp_path / "history.json"
    with atomic_write(path) as file:
        file.write("old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_write(path) as file:
            file.write("new but incomplete")
            raise KeyboardInterrupt  # stands in for a kill in the middle of a write
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["history.json"]  # no temporary file left behind
    with atomic_write(path) as file:
        file.write("new")
    assert path.read_text() == "new"
    assert oct(os.stat(path).st_mode & 0o777) != oct(0o600)  # the usual mode, not mkstemp's
