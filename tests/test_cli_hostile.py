"""Hostile input to the commands: each failure is one line that names the input and the fix,
and no earlier file is lost or changed."""

import os

import pytest

from keras_transformer.cli import main


def _one_error_line(capsys, command):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"keras-transformer {command}: error: "), err
    return err[0]


@pytest.fixture
def one_long_line(tmp_path):
    path = tmp_path / "long.txt"
    path.write_text(" ".join(["word"] * 10_000) + "\n")
    return path


def test_vocab_of_a_single_10000_word_line(one_long_line, tmp_path, capsys):
    prefix = tmp_path / "out" / "v"
    command = ["vocab", "--pair", str(one_long_line), str(one_long_line), "--output", str(prefix)]
    assert main([*command, "--vocab-size", "64"]) == 2
    line = _one_error_line(capsys, "vocab")
    assert "max_sentence_length=4192" in line and "--max-sentence-length" in line
    assert not prefix.parent.exists() or not os.listdir(prefix.parent)


def test_evaluate_refuses_an_empty_file_before_loading_a_model(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    reference = tmp_path / "ref.txt"
    reference.write_text("a b c\n")
    # The model does not exist: the empty file is found first.
    command = ["evaluate", "--model", str(tmp_path / "none"), "--source", str(empty)]
    assert main([*command, "--reference", str(reference)]) == 2
    assert f"{str(empty)!r} is empty" in _one_error_line(capsys, "evaluate")
    hypotheses = ["evaluate", "--hypotheses", str(reference), "--reference", str(empty)]
    assert main(hypotheses) == 2
    assert f"{str(empty)!r} is empty" in _one_error_line(capsys, "evaluate")


def test_a_picture_write_that_fails_keeps_the_earlier_picture(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from keras_transformer import visualization

    path = tmp_path / "attention.png"
    path.write_bytes(b"an earlier picture")

    def failing_savefig(self, file, **kwargs):
        file.write(b"half a pic")
        raise OSError("disk full")

    monkeypatch.setattr(Figure, "savefig", failing_savefig)
    with pytest.raises(OSError, match="disk full"):
        visualization._save(Figure(), str(path))
    assert path.read_bytes() == b"an earlier picture"
    assert os.listdir(tmp_path) == ["attention.png"]


def test_an_output_under_a_file_is_refused_before_the_work(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    text = tmp_path / "text.txt"
    text.write_text("a b c\n")
    # The model does not exist: the output is checked first (average and evaluate both
    # check before their long part, averaging or translating a test set).
    command = ["evaluate", "--model", str(tmp_path / "none"), "--source", str(text)]
    assert main([*command, "--reference", str(text), "--output", str(blocker / "x.txt")]) == 2
    assert f"{str(blocker)!r} is a file, not a folder" in _one_error_line(capsys, "evaluate")
    assert main(["average", str(tmp_path / "none"), "--output", str(blocker / "a.keras")]) == 2
    assert f"{str(blocker)!r} is a file, not a folder" in _one_error_line(capsys, "average")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "text.txt"]
