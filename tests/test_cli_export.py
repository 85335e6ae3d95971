"""`keras-transformer export`: a run folder to saved_models/NAME/VERSION/ that translates with
the settings given on the command line; bad input is one line and exit code 2."""

import json

import keras
import pytest
import tensorflow as tf

from keras_transformer.cli import main
from keras_transformer.translation import Translator
from tests._decoding_fixtures import SENTENCES, tiny_copy_run_folder

# One beam width keeps the export short (each width up to --max-beam-size is a search
# compiled into the graph).
SETTINGS = ["--max-beam-size", "1", "--beam-size", "1", "--alpha", "0.6", "--max-extra-length", "4"]


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    return tiny_copy_run_folder(tmp_path_factory)


def test_export_writes_name_version_and_translates(run_folder, tmp_path, capsys):
    base = tmp_path / "saved_models"
    assert (
        main(
            [
                "export",
                "--model",
                str(run_folder),
                "--name",
                "tiny",
                "--base-dir",
                str(base),
                *SETTINGS,
            ]
        )
        == 0
    )
    path = base / "tiny" / "1"
    assert (path / "saved_model.pb").is_file() and (path / "variables").is_dir()
    out = capsys.readouterr().out
    assert f"to {path}" in out and "--model_name=tiny" in out
    # The command-line settings are the defaults of requests that leave them out.
    with open(path / "assets.extra" / "keras_transformer.json") as file:
        assert json.load(file)["defaults"] == {
            "beam_size": 1,
            "alpha": 0.6,
            "max_extra_length": 4,
            "num_hypotheses": 1,
            "length_penalty": "gnmt",
        }
    texts = SENTENCES[:4]
    loaded = tf.saved_model.load(str(path))  # kept: its functions need its variables alive
    served = loaded.translate(tf.constant(texts))["translation"]
    expected = Translator.load(
        str(run_folder), beam_size=1, alpha=0.6, max_extra_length=4
    ).translate(texts)
    assert [text.decode() for text in served.numpy()] == expected
    # An existing version is never overwritten: one line, exit code 2, version 1 intact.
    assert (
        main(
            [
                "export",
                "--model",
                str(run_folder),
                "--name",
                "tiny",
                "--base-dir",
                str(base),
                "--version",
                "1",
                *SETTINGS,
            ]
        )
        == 2
    )
    assert "already exists" in _error_line(capsys)
    assert sorted(p.name for p in (base / "tiny").iterdir()) == ["1"]
    assert (path / "saved_model.pb").stat().st_size > 0


def _error_line(capsys):
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("keras-transformer export: error: "), err
    return lines[0]


def test_bad_input_is_one_line_and_exit_code_2(run_folder, tmp_path, capsys):
    base = tmp_path / "saved_models"
    common = ["--name", "tiny", "--base-dir", str(base), *SETTINGS]
    assert main(["export", "--model", str(tmp_path / "missing"), *common]) == 2
    assert "missing" in _error_line(capsys)
    # A .keras file that carries no vocabulary (saved outside a run), with no vocab.model
    # beside it and no --vocab.
    lone = tmp_path / "lone"
    lone.mkdir()
    bare = keras.saving.load_model(run_folder / "model.keras", compile=False)
    bare.tokenizer = None
    bare.save(lone / "model.keras")
    assert main(["export", "--model", str(lone / "model.keras"), *common]) == 2
    assert "pass --vocab FILE" in _error_line(capsys)
    assert (
        main(
            [
                "export",
                "--model",
                str(run_folder),
                "--name",
                "../up",
                "--base-dir",
                str(base),
                *SETTINGS,
            ]
        )
        == 2
    )
    assert "model name '../up'" in _error_line(capsys)
    assert main(["export", "--model", str(run_folder), *common, "--beam-size", "3"]) == 2
    assert "beam" in _error_line(capsys)
    # The default beam above a narrower --max-beam-size: both flags named, not a bare range.
    assert (
        main(
            [
                "export",
                "--model",
                str(run_folder),
                "--name",
                "tiny",
                "--base-dir",
                str(base),
                "--max-beam-size",
                "2",
            ]
        )
        == 2
    )
    assert (
        "--beam-size=4 (the beam of a request that names none; default: the run's "
        "decoding.json, else 4) is above "
        "--max-beam-size=2: lower --beam-size or raise --max-beam-size" in _error_line(capsys)
    )
    # Nothing was written by the failed exports.
    assert not (base / "tiny").exists() or not any((base / "tiny").iterdir())
