"""Writes that a kill never leaves half-written, and output checks before the work."""

import os
import stat

import pytest

from keras_transformer.errors import UserInputError
from keras_transformer.files import (
    atomic_copy,
    atomic_directory,
    atomic_write,
    check_new_output_file,
    temporary_beside,
)


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


def test_temporary_beside_renames_on_success_and_removes_on_failure(tmp_path):
    path = tmp_path / "model.keras"
    with pytest.raises(RuntimeError):
        with temporary_beside(path, suffix=".keras") as name:
            assert name.endswith(".keras") and os.path.dirname(name) == str(tmp_path)
            open(name, "w").write("half")
            raise RuntimeError
    assert os.listdir(tmp_path) == []
    with temporary_beside(path, suffix=".keras") as name:
        open(name, "w").write("whole")
    assert path.read_text() == "whole"
    assert os.listdir(tmp_path) == ["model.keras"]


def test_atomic_copy(tmp_path):
    source = tmp_path / "source"
    source.write_bytes(b"\x00\x01vocabulary")
    atomic_copy(source, tmp_path / "copy")
    assert (tmp_path / "copy").read_bytes() == b"\x00\x01vocabulary"
    assert sorted(os.listdir(tmp_path)) == ["copy", "source"]


def test_atomic_directory_replaces_the_old_folder_whole(tmp_path):
    target = tmp_path / "parent" / "export"
    with atomic_directory(target) as staging:
        (staging / "model.bin").write_text("old")
    assert (target / "model.bin").read_text() == "old"
    mode = stat.S_IMODE(os.stat(target).st_mode)
    assert mode == 0o777 & ~_umask()  # the usual mode, not mkdtemp's 0o700
    with pytest.raises(KeyboardInterrupt):
        with atomic_directory(target) as staging:
            (staging / "model.bin").write_text("new but incomplete")
            raise KeyboardInterrupt  # stands in for a kill in the middle of the export
    assert (target / "model.bin").read_text() == "old"
    with atomic_directory(target) as staging:
        (staging / "config.json").write_text("new")
    assert sorted(os.listdir(target)) == ["config.json"]  # replaced, not merged
    assert os.listdir(target.parent) == ["export"]  # no staging or old folder left


def test_atomic_directory_under_a_file_is_a_user_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserInputError, match="cannot write beside"):
        with atomic_directory(tmp_path / "file" / "export"):
            pass


def test_check_new_output_file(tmp_path):
    existing = tmp_path / "out.txt"
    existing.write_text("earlier")
    with pytest.raises(UserInputError, match=r"--output .* exists already; give --overwrite"):
        check_new_output_file(existing, "--output", overwrite=False)
    check_new_output_file(existing, "--output", overwrite=True)
    check_new_output_file(tmp_path / "new" / "out.txt", "--output", overwrite=False)
    with pytest.raises(UserInputError, match="is a folder"):
        check_new_output_file(tmp_path, "--output", overwrite=True)
    with pytest.raises(UserInputError, match="is a file, not a folder"):
        check_new_output_file(existing / "out.txt", "--output", overwrite=False)


def _umask():
    umask = os.umask(0)
    os.umask(umask)
    return umask
