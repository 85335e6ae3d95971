"""Checkpoint averaging: the averaged weights are the elementwise mean of the checkpoints'."""

import io
import shutil

import keras
import numpy as np
import pytest
import sentencepiece

from keras_transformer import TransformerConfig, build_model, build_optimizer
from keras_transformer.cli import main as cli_main
from keras_transformer.data.vocabulary import SubwordVocabulary
from keras_transformer.errors import UserInputError
from keras_transformer.parsing.linearization import Linearizer
from keras_transformer.parsing.parser import read_parsing_settings
from keras_transformer.runs.averaging import average_checkpoints, in_last_fraction
from keras_transformer.runs.checkpoints import Checkpointer, list_checkpoints
from keras_transformer.runs.layout import OutputDir
from keras_transformer.runs.models import load_model
from keras_transformer.translation import Translator
from tests._training_fixtures import max_abs_difference

CONFIG = TransformerConfig(vocab_size=40, num_layers=1, d_model=16, d_ff=32, num_heads=2)


@pytest.fixture(scope="module")
def run_with_checkpoints(tmp_path_factory):
    """A run folder with 3 checkpoints of random weights (and Adam slots that must not leak
    into the average)."""
    run = OutputDir(tmp_path_factory.mktemp("run"))
    run.prepare()
    with open(run.model_config, "w") as file:
        file.write(CONFIG.to_json())
    model = build_model(CONFIG)
    optimizer = build_optimizer(CONFIG.d_model)
    optimizer.build(model.trainable_variables)
    checkpointer = Checkpointer(run.checkpoint_dir, model, optimizer, keep_last=5)
    rng = np.random.default_rng(0)
    saved = []
    for step in (100, 200, 300):
        weights = [rng.normal(size=w.shape).astype("float32") for w in model.get_weights()]
        model.set_weights(weights)
        for slot in optimizer.variables[1:]:  # non-zero moments, different each time
            slot.assign(rng.normal(size=slot.shape).astype("float32") * 100)
        checkpointer.save(step)
        saved.append(weights)
    return run, saved


def _mean(weight_sets):
    return [np.mean(np.stack(group), axis=0) for group in zip(*weight_sets)]


def test_average_is_the_elementwise_mean(run_with_checkpoints):
    run, saved = run_with_checkpoints
    averaged = average_checkpoints(run.path, last=3)
    assert max_abs_difference(averaged.get_weights(), _mean(saved)) < 1e-6
    # Not the weights of any single checkpoint.
    assert max_abs_difference(averaged.get_weights(), saved[-1]) > 0.1


def test_last_n_and_explicit_paths(run_with_checkpoints):
    run, saved = run_with_checkpoints
    last_two = average_checkpoints(run.checkpoint_dir, last=2)
    assert max_abs_difference(last_two.get_weights(), _mean(saved[1:])) < 1e-6
    paths = list_checkpoints(run.checkpoint_dir)
    first_and_last = average_checkpoints([paths[0], paths[2]], config=CONFIG)
    assert max_abs_difference(first_and_last.get_weights(), _mean([saved[0], saved[2]])) < 1e-6


def test_average_command_writes_a_loadable_model(run_with_checkpoints, tmp_path, capsys):
    run, saved = run_with_checkpoints
    output = str(tmp_path / "averaged.keras")
    assert cli_main(["average", run.path, "--last", "3", "--output", output]) == 0
    assert "averaged 3 checkpoints (ckpt-100 .. ckpt-300)" in capsys.readouterr().out
    loaded = keras.saving.load_model(output)
    assert max_abs_difference(loaded.get_weights(), _mean(saved)) < 1e-6


def test_errors(run_with_checkpoints, tmp_path):
    run, _ = run_with_checkpoints
    with pytest.raises(UserInputError, match="holds 3: lower --last"):
        average_checkpoints(run.path, last=4)
    with pytest.raises(UserInputError, match="no checkpoints in"):
        average_checkpoints(str(tmp_path), last=1)
    with pytest.raises(UserInputError, match="is not a checkpoint"):
        average_checkpoints([str(tmp_path / "ckpt-1")], config=CONFIG)
    assert cli_main(["average", run.path, "--last", "9"]) == 2


def test_in_last_fraction_selects_by_update_number():
    # Checkpoints every 500 updates and one more where a time limit stopped training, at 7505.
    checkpoints = [f"c/ckpt-{step}" for step in [*range(500, 8000, 500), 7505]]
    # 30% of 7505 updates is 2251.5: above update 5253.5.
    assert in_last_fraction(checkpoints, 0.3) == [
        f"c/ckpt-{s}" for s in (5500, 6000, 6500, 7000, 7500, 7505)
    ]
    assert in_last_fraction(checkpoints, 0.5) == checkpoints[7:]  # above 3752.5: 4000 on
    assert in_last_fraction(checkpoints, 1.0) == checkpoints
    assert in_last_fraction(checkpoints, 1e-9) == ["c/ckpt-7505"]  # the newest, always
    with pytest.raises(UserInputError, match="above 0 and at most 1, got 0"):
        in_last_fraction(checkpoints, 0)
    with pytest.raises(UserInputError, match="at most 1, got 1.5"):
        in_last_fraction(checkpoints, 1.5)
    with pytest.raises(UserInputError, match="'c/final' does not end in its update number"):
        in_last_fraction(["c/ckpt-500", "c/final"], 0.5)


def test_last_fraction_of_a_folder(run_with_checkpoints, tmp_path, capsys):
    run, saved = run_with_checkpoints
    # Checkpoints at 100, 200 and 300: the last half of the updates is above 150.
    half = average_checkpoints(run.path, last=3, last_fraction=0.5)
    assert max_abs_difference(half.get_weights(), _mean(saved[1:])) < 1e-6
    # --last caps the count, and fewer than --last is no error with a fraction.
    assert (
        average_checkpoints(run.path, last=1, last_fraction=1.0).averaged_checkpoints
        == list_checkpoints(run.checkpoint_dir)[-1:]
    )
    assert len(average_checkpoints(run.path, last=9, last_fraction=1.0).averaged_checkpoints) == 3
    output = str(tmp_path / "averaged.keras")
    assert (
        cli_main(["average", run.path, "--last", "3", "--fraction", "0.5", "--output", output]) == 0
    )
    assert "averaged 2 checkpoints (ckpt-200 .. ckpt-300)" in capsys.readouterr().out
    assert (
        max_abs_difference(keras.saving.load_model(output).get_weights(), _mean(saved[1:])) < 1e-6
    )
    paths = list_checkpoints(run.checkpoint_dir)
    assert (
        cli_main(
            [
                "average",
                run.path,
                "--fraction",
                "0.5",
                "--checkpoints",
                *paths,
                "--output",
                str(tmp_path / "other.keras"),
            ]
        )
        == 2
    )
    assert "with --checkpoints, list only the ones" in capsys.readouterr().err
    assert not (tmp_path / "other.keras").exists()


def _write_tiny_vocabulary(path):
    """A character SentencePiece model with the project's ids, within CONFIG's 40 ids."""
    proto = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(["a cab", "bad cab", "dab a cad"] * 20),
        model_writer=proto,
        model_type="char",
        vocab_size=20,
        hard_vocab_limit=False,
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        minloglevel=2,
    )
    with open(path, "wb") as file:
        file.write(proto.getvalue())


@pytest.fixture
def parsing_run(run_with_checkpoints, tmp_path):
    """The run with checkpoints, copied, given a vocab.model and a parsing.json."""
    source, saved = run_with_checkpoints
    run = OutputDir(shutil.copytree(source.path, tmp_path / "run"))
    _write_tiny_vocabulary(run.vocabulary)
    (tmp_path / "run" / "parsing.json").write_text('{"closing_labels": false, "pos_tags": true}')
    return run, saved


def test_average_output_elsewhere_carries_the_vocabulary_and_parsing_settings(
    parsing_run, tmp_path
):
    run, saved = parsing_run
    output = tmp_path / "elsewhere" / "averaged.keras"  # a folder not there yet
    assert cli_main(["average", run.path, "--last", "3", "--output", str(output)]) == 0
    model, files = load_model(str(output))
    assert max_abs_difference(model.get_weights(), _mean(saved)) < 1e-6
    assert files["vocabulary"] == SubwordVocabulary.from_file(run.vocabulary)
    assert read_parsing_settings(str(output)) == Linearizer(pos_tags=True, closing_labels=False)
    # As translate and parse load it: no --vocab, nothing else beside it.
    assert Translator.load(str(output)).vocabulary == files["vocabulary"]


def test_average_refuses_an_output_beside_other_parsing_settings(parsing_run, tmp_path, capsys):
    run, _ = parsing_run
    other = tmp_path / "other_run"
    other.mkdir()
    (other / "parsing.json").write_text('{"closing_labels": true, "pos_tags": false}')
    assert (
        cli_main(["average", run.path, "--last", "3", "--output", str(other / "averaged.keras")])
        == 2
    )
    assert "parsing.json" in capsys.readouterr().err
    assert sorted(p.name for p in other.iterdir()) == ["parsing.json"]  # nothing written
    # The same linearization with another run's opening penalty: replacing the file would
    # change how that run's model parses.
    penalized = '{"closing_labels": false, "opening_penalty": 0.5, "pos_tags": true}'
    (other / "parsing.json").write_text(penalized)
    assert (
        cli_main(["average", run.path, "--last", "3", "--output", str(other / "averaged.keras")])
        == 2
    )
    assert "parsing.json" in capsys.readouterr().err
    assert (other / "parsing.json").read_text() == penalized
    assert sorted(p.name for p in other.iterdir()) == ["parsing.json"]
    # The same settings written before word_slots existed (and with the default penalty
    # spelled out) are this run's own.
    (other / "parsing.json").write_text(
        '{"closing_labels": false, "opening_penalty": 0.0, "pos_tags": true}'
    )
    assert (
        cli_main(["average", run.path, "--last", "3", "--output", str(other / "averaged.keras")])
        == 0
    )
