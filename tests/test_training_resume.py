"""Exact resume: a run with dropout, killed with SIGKILL 4 times at random points (one during
start-up, one inside a checkpoint write) and restarted with the same command each time, ends
with the weights of the same run never interrupted. The schedule of the kills is drawn anew
in each test session (tests/_kill_fixtures.py: KT_KILL_SEED replays one).

Equal weights need every piece of training state restored: the weights, the step (learning
rate), the Adam moments, the dropout layers' seed-generator states and the data position.
Dropout 0.1 makes the seed generators matter: a resumed run that restarted them from their
initial state would draw other masks and end elsewhere.

The command run each time is the CLI's `train` on one config, in a process of its own
(tests/_kill_fixtures.py).
"""

import logging
import os
import random
import shutil
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.runs.checkpoints import list_checkpoints
from keras_transformer.runs.layout import OutputDir
from keras_transformer.training import train
from tests._kill_fixtures import (  # noqa: F401 (show_kill_seed: an autouse fixture)
    KILL_SEED,
    Launcher,
    checkpoint_steps,
    kill_runs,
    show_kill_seed,
)
from tests._training_fixtures import tiny_config, write_config, write_reverse_corpus

# The kill fixture with its runs takes 1.5 min on a loaded 2-core machine; a hung run fails
# sooner than the suite-wide timeout (the launcher's own deadline fails it first).
pytestmark = pytest.mark.timeout(420)

TRAIN_STEPS = 24
KILLS = 4


def _config(output_dir, corpus):
    return tiny_config(
        output_dir,
        corpus,
        data={"dev": None},
        model={
            "dropout": 0.1,
            "preset": "base",
            "num_layers": 1,
            "d_model": 32,
            "d_ff": 64,
            "num_heads": 4,
        },
        schedule={
            "train_steps": TRAIN_STEPS,
            "eval_every_steps": TRAIN_STEPS // 2,
            "log_every_steps": 6,
        },
        checkpoints={"every_steps": 1, "keep_last": 3, "average_last": 0},
    )


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    directory = tmp_path_factory.mktemp("resume")
    corpus = write_reverse_corpus(directory / "corpus")
    config = write_config(directory / "config.json", _config(directory / "killed", corpus))
    pause_request = directory / "pause-in-save"
    checkpoint_dir = str(directory / "killed" / "checkpoints")
    launcher = Launcher(directory, config, pause_request)

    rng = random.Random(KILL_SEED)
    # One kill during start-up (before or while restoring), one inside a checkpoint write,
    # the others a random time after a random number of new checkpoints.
    modes = ["startup", "write"] + ["steps"] * (KILLS - 2)
    rng.shuffle(modes)
    started = time.monotonic()
    try:
        kills = kill_runs(launcher, modes, rng, checkpoint_dir)
        run = launcher.start()
        status = run.wait()
        assert status == 0, launcher.log(run.number, "err")[-6000:]
        finished = launcher.log(run.number, "out")
        finished_stderr = launcher.log(run.number, "err")
    finally:
        launcher.close()
    killed_seconds = time.monotonic() - started

    # The reference: the same config, never interrupted (in this process).
    reference = train(_config(directory / "reference", corpus))
    return {
        "kills": kills,
        "finished": finished,
        "finished_stderr": finished_stderr,
        "reference": reference,
        "corpus": corpus,
        "run_dir": directory / "killed",
        "killed_seconds": killed_seconds,
    }


def test_four_kills_then_the_weights_of_an_uninterrupted_run(killed_run):
    kills = killed_run["kills"]
    assert len(kills) == KILLS
    assert killed_run["finished"].count(f"trained to step {TRAIN_STEPS}") == 1
    # Kills were spread over the run: most killed processes had trained further.
    assert len({kill["listed"][-1] for kill in kills if kill["listed"]}) >= 3
    resumed = keras.saving.load_model(OutputDir(killed_run["run_dir"]).final_model)
    reference = killed_run["reference"].model
    assert len(resumed.weights) == len(reference.weights)
    # Bitwise: the same ops on the same data in the same order, on one CPU device.
    for resumed_weight, reference_weight in zip(resumed.weights, reference.weights):
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(resumed_weight),
            keras.ops.convert_to_numpy(reference_weight),
            err_msg=resumed_weight.path,
        )


def test_kill_inside_a_checkpoint_write_resumes_from_the_previous_one(killed_run):
    [kill] = [kill for kill in killed_run["kills"] if kill["mode"] == "write"]
    paused_step = int(kill["paused_in"].rsplit("-", 1)[1])
    # Its files were written, but the state file did not list it: the restart ignored it.
    assert kill["unlisted_files"]
    assert kill["listed"][-1] == paused_step - 1


def test_checkpoints_hold_the_dropout_seed_and_data_position(killed_run):
    latest = list_checkpoints(killed_run["run_dir"] / "checkpoints")[-1]
    reader = tf.train.load_checkpoint(latest)
    names = [name for name, _ in tf.train.list_variables(latest)]
    seeds = [name for name in names if name.startswith("seed_generators/")]
    # One seed generator per dropout layer of the 1+1-layer model with dropout > 0.
    assert len(seeds) == 7
    states = [reader.get_tensor(name) for name in seeds]
    # Dropout drew masks: every state moved from its initial [seed, 0].
    assert all(state[1] > 0 for state in states)
    assert any(name.startswith("data_iterator/") for name in names)


def test_restart_reports_its_step_and_keeps_the_last_checkpoints(killed_run):
    resumed_from = killed_run["kills"][-1]["listed"][-1]
    stdout = killed_run["finished"]
    assert f"resumed from the checkpoint of step {resumed_from}" in stdout
    assert checkpoint_steps(killed_run["run_dir"] / "checkpoints") == [
        TRAIN_STEPS - 2,
        TRAIN_STEPS - 1,
        TRAIN_STEPS,
    ]  # keep_last 3


def _own_copy(killed_run, tmp_path):
    """A copy of the killed run for a test that trains on, so that the run the other tests
    read stays as the kills left it, whatever order the tests run in."""
    return shutil.copytree(killed_run["run_dir"], tmp_path / "killed")


def test_finished_run_is_not_trained_again(killed_run, caplog, tmp_path):
    run_dir = _own_copy(killed_run, tmp_path)
    with caplog.at_level(logging.WARNING, logger="keras_transformer.training.trainer"):
        result = train(_config(run_dir, killed_run["corpus"]))
    assert result.resumed_from_step == TRAIN_STEPS and result.step == TRAIN_STEPS
    assert result.history == {}
    assert any(
        f"has trained {TRAIN_STEPS} steps already and schedule.train_steps is "
        f"{TRAIN_STEPS}: nothing to train" in record.getMessage()
        for record in caplog.records
    )


def test_the_cli_run_logs_where_it_resumed_as_it_starts(killed_run):
    # The restart's stderr (the CLI's log handler), before its own summary on stdout.
    resumed_from = killed_run["kills"][-1]["listed"][-1]
    assert (
        f"resuming {killed_run['run_dir']} from step {resumed_from}"
        in (killed_run["finished_stderr"])
    )


def test_corrupt_newest_checkpoint_does_not_lose_the_run(killed_run, caplog, tmp_path):
    """A truncated newest checkpoint: the restart warns, trains on from the one before, and
    keeps the damaged files aside."""
    run_dir = _own_copy(killed_run, tmp_path)
    checkpoint_dir = run_dir / "checkpoints"
    [data_file] = tf.io.gfile.glob(str(checkpoint_dir / f"ckpt-{TRAIN_STEPS}.data-*"))
    with open(data_file, "r+b") as file:
        file.truncate(os.path.getsize(data_file) // 3)
    config = _config(run_dir, killed_run["corpus"])
    config["schedule"]["train_steps"] = TRAIN_STEPS + 2
    with caplog.at_level(logging.WARNING, logger="keras_transformer.runs.checkpoints"):
        result = train(config)
    assert result.resumed_from_step == TRAIN_STEPS - 1 and result.step == TRAIN_STEPS + 2
    assert any(
        f"ckpt-{TRAIN_STEPS} cannot be read" in record.getMessage() for record in caplog.records
    )
    assert (checkpoint_dir / "corrupt" / f"ckpt-{TRAIN_STEPS}.index").exists()
    assert checkpoint_steps(checkpoint_dir) == [TRAIN_STEPS, TRAIN_STEPS + 1, TRAIN_STEPS + 2]
