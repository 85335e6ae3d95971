"""What the commands that write files do when their target exists, and what a failed `train`
start leaves: an existing file is replaced only when asked (`--overwrite`), and a start that
fails leaves the file system as it found it."""

import json
import os
import shutil

import pytest

from keras_transformer import TransformerConfig, build_model, build_optimizer
from keras_transformer.cli import main as cli_main
from keras_transformer.data.corpora import TextPairCorpus
from keras_transformer.data.vocabulary import train_vocabulary
from keras_transformer.runs.checkpoints import Checkpointer
from keras_transformer.runs.layout import OutputDir
from keras_transformer.training.config import TrainingConfig
from tests._training_fixtures import tiny_config, write_config, write_reverse_corpus

MODEL = TransformerConfig(vocab_size=40, num_layers=1, d_model=16, d_ff=32, num_heads=2)


@pytest.fixture(scope="module")
def checkpointed_run(tmp_path_factory):
    """A run folder with two checkpoints of a tiny model."""
    run = OutputDir(tmp_path_factory.mktemp("run"))
    run.prepare()
    with open(run.model_config, "w") as file:
        file.write(MODEL.to_json())
    model = build_model(MODEL)
    optimizer = build_optimizer(MODEL.d_model)
    optimizer.build(model.trainable_variables)
    checkpointer = Checkpointer(run.checkpoint_dir, model, optimizer, keep_last=5)
    for step in (10, 20):
        checkpointer.save(step)
    return run


def _one_error_line(capsys, command):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"keras-transformer {command}: error: "), err
    return err[0]


def test_average_refuses_an_existing_output_unless_overwrite(checkpointed_run, tmp_path, capsys):
    output = tmp_path / "mine.keras"
    output.write_bytes(b"an earlier model")
    assert cli_main(["average", checkpointed_run.path, "--last", "2", "--output", str(output)]) == 2
    line = _one_error_line(capsys, "average")
    assert str(output) in line and "--overwrite" in line
    assert output.read_bytes() == b"an earlier model"
    assert sorted(os.listdir(tmp_path)) == ["mine.keras"]  # no temporary file left
    assert (
        cli_main(
            [
                "average",
                checkpointed_run.path,
                "--last",
                "2",
                "--output",
                str(output),
                "--overwrite",
            ]
        )
        == 0
    )
    assert output.read_bytes()[:2] == b"PK"  # a .keras file (a zip archive) now


def test_average_rewrites_the_runs_own_averaged_model(checkpointed_run, capsys):
    # Training itself writes RUN/averaged.keras at every end: averaging anew may replace it.
    own = checkpointed_run.averaged_model
    for _ in range(2):
        assert cli_main(["average", checkpointed_run.path, "--last", "2"]) == 0
    assert cli_main(["average", checkpointed_run.path, "--last", "2", "--output", own]) == 0
    assert "into" in capsys.readouterr().out and os.path.isfile(own)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_reverse_corpus(tmp_path_factory.mktemp("corpus"), train_lines=200)


def test_vocab_refuses_an_existing_prefix_unless_overwrite(corpus, tmp_path, capsys):
    prefix = str(tmp_path / "v")
    command = ["vocab", "--pair", corpus["train_source"], corpus["train_target"]]
    command += ["--vocab-size", "320", "--output", prefix]
    (tmp_path / "v.vocab").write_text("an earlier vocabulary\n")
    assert cli_main(command) == 2
    line = _one_error_line(capsys, "vocab")
    assert f"{prefix}.vocab" in line and "--overwrite" in line
    assert sorted(os.listdir(tmp_path)) == ["v.vocab"]
    assert (tmp_path / "v.vocab").read_text() == "an earlier vocabulary\n"
    assert cli_main([*command, "--overwrite"]) == 0
    assert (tmp_path / "v.vocab").read_text().startswith("<pad>")
    capsys.readouterr()
    assert cli_main(command) == 2  # the .model it wrote is now refused as well
    assert f"{prefix}.model" in _one_error_line(capsys, "vocab")


@pytest.fixture(scope="module")
def misaligned(corpus, tmp_path_factory):
    """The corpus with one target line fewer than its source, and a vocabulary for it."""
    directory = tmp_path_factory.mktemp("misaligned")
    target = directory / "train.tgt"
    with open(corpus["train_target"]) as file:
        target.write_text("".join(file.readlines()[:-1]))
    vocabulary = str(directory / "v")
    train_vocabulary(
        [TextPairCorpus(corpus["train_source"], corpus["train_target"])], vocabulary, vocab_size=320
    )
    return {**corpus, "train_target": str(target), "vocab": vocabulary + ".model"}


def _config(output_dir, misaligned, dropout):
    return tiny_config(
        output_dir,
        misaligned,
        data={"dev": None, "vocab": misaligned["vocab"]},
        model={"dropout": dropout},
    )


def test_a_failed_train_start_removes_the_run_folder_it_made(misaligned, tmp_path, capsys):
    run_dir = tmp_path / "runs" / "new"
    config = write_config(tmp_path / "config.json", _config(run_dir, misaligned, 0.0))
    assert cli_main(["train", "--config", config]) == 2
    line = _one_error_line(capsys, "train")
    assert misaligned["train_target"] in line or misaligned["train_source"] in line
    assert not (tmp_path / "runs").exists()  # runs/ too: the start made it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


def test_a_failed_train_start_leaves_an_existing_runs_files_alone(misaligned, tmp_path, capsys):
    # A run started with dropout 0.0; a new start with 0.1 goes on under it (config.json is
    # rewritten, the old one kept aside) — but only once the start has succeeded.
    run = OutputDir(tmp_path / "run")
    os.makedirs(run.checkpoint_dir)
    before = TrainingConfig.from_dict(_config(run.path, misaligned, 0.0))
    with open(run.model_config, "w") as file:
        file.write(before.transformer_config(vocab_size=320).to_json())
    with open(run.training_config, "w") as file:
        file.write(before.to_json())
    shutil.copyfile(misaligned["vocab"], run.vocabulary)
    files = {
        name: (tmp_path / "run" / name).read_bytes()
        for name in os.listdir(run.path)
        if name != "checkpoints"
    }
    config = write_config(tmp_path / "config.json", _config(run.path, misaligned, 0.1))
    assert cli_main(["train", "--config", config]) == 2
    _one_error_line(capsys, "train")
    assert sorted(os.listdir(run.path)) == sorted([*files, "checkpoints"])
    assert os.listdir(run.checkpoint_dir) == []
    for name, content in files.items():
        assert (tmp_path / "run" / name).read_bytes() == content, name
    assert json.loads(files["config.json"])["dropout"] == 0.0
    assert sorted(files) == ["config.json", "training_config.json", "vocab.model"]


@pytest.mark.parametrize(
    "command, arguments",
    [
        ("translate", ["-i", "{source}", "-o", "{output}"]),
        ("translate", ["-i", "{source}", "--alignments", "{output}"]),
        ("score", ["--source", "{source}", "--target", "{source}", "-o", "{output}"]),
        ("evaluate", ["--source", "{source}", "--reference", "{source}", "--output", "{output}"]),
        ("parse", ["--input", "{source}", "--output", "{output}"]),
    ],
)
def test_commands_that_write_text_refuse_an_existing_file_before_the_model_loads(
    command, arguments, tmp_path, capsys
):
    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("a b\n", encoding="utf-8")
    output.write_text("an earlier output\n", encoding="utf-8")
    filled = [value.format(source=source, output=output) for value in arguments]
    # No model folder: the refusal must come before any load.
    assert cli_main([command, "--model", str(tmp_path / "run"), *filled]) == 2
    flag = arguments[-2] if arguments[-2] != "-o" else "--output"
    assert _one_error_line(capsys, command).endswith(
        f"{flag} {str(output)!r} exists already; give --overwrite to replace it, or another {flag}"
    )
    assert output.read_text(encoding="utf-8") == "an earlier output\n"
    # With --overwrite the same command gets past the check, to the missing model.
    assert cli_main([command, "--model", str(tmp_path / "run"), *filled, "--overwrite"]) == 2
    assert "exists already" not in _one_error_line(capsys, command)
    assert output.read_text(encoding="utf-8") == "an earlier output\n"
