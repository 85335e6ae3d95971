"""Checkpoint averaging: the averaged weights are the elementwise mean of the checkpoints'."""

import keras
import numpy as np
import pytest

from keras_transformer import TransformerConfig, build_model, build_optimizer
from keras_transformer.cli import main as cli_main
from keras_transformer.errors import UserInputError
from keras_transformer.training import Checkpointer, average_checkpoints, list_checkpoints
from keras_transformer.training.output_dir import OutputDir
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
