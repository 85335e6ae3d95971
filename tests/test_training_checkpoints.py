"""Checkpoints survive SIGKILL: the same command resumes with step, optimizer state and data
position, and ends where an uninterrupted run ends."""

import os
import signal
import subprocess
import time

import keras
import pytest

from keras_transformer.training import Checkpointer, TrainingConfig, list_checkpoints, train
from keras_transformer.training.output_dir import OutputDir
from tests._training_fixtures import (
    PYTHON,
    REPO,
    max_abs_difference,
    subprocess_env,
    tiny_config,
    write_config,
    write_reverse_corpus,
)

TRAIN_STEPS = 60


def _config(output_dir, corpus):
    return tiny_config(output_dir, corpus, data={"dev": None},
                       schedule={"train_steps": TRAIN_STEPS, "eval_every_steps": 20},
                       checkpoints={"every_steps": 2, "keep_last": 4, "average_last": 2})


def _train_command(config_path):
    return [PYTHON, "-m", "keras_transformer", "train", "--config", config_path]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    directory = tmp_path_factory.mktemp("resume")
    corpus = write_reverse_corpus(directory / "corpus")

    # The reference: the same config, never interrupted.
    reference = train(_config(directory / "reference", corpus))

    config_path = write_config(directory / "config.json", _config(directory / "killed", corpus))
    checkpoint_dir = os.path.join(directory, "killed", "checkpoints")
    process = subprocess.Popen(_train_command(config_path), cwd=REPO, env=subprocess_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and process.poll() is None:
            paths = list_checkpoints(checkpoint_dir) if os.path.isdir(checkpoint_dir) else []
            if paths and int(paths[-1].rsplit("-", 1)[1]) >= 10:
                break
            time.sleep(0.02)
        assert process.poll() is None, (
            "the run ended before it could be killed: " + process.stderr.read()[-3000:])
        process.send_signal(signal.SIGKILL)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
    killed_at = list_checkpoints(checkpoint_dir)[-1]

    resumed = subprocess.run(_train_command(config_path), cwd=REPO, env=subprocess_env(),
                             capture_output=True, text=True, timeout=240)
    assert resumed.returncode == 0, resumed.stderr[-6000:]
    return {"reference": reference, "killed_at": int(killed_at.rsplit("-", 1)[1]),
            "resumed": resumed, "run_dir": directory / "killed", "corpus": corpus}


def test_restart_continues_from_the_last_checkpoint(runs):
    assert runs["killed_at"] < TRAIN_STEPS
    stdout = runs["resumed"].stdout
    assert f"resumed from the checkpoint of step {runs['killed_at']}" in stdout
    assert f"trained to step {TRAIN_STEPS}" in stdout
    steps = [int(p.rsplit("-", 1)[1]) for p in list_checkpoints(runs["run_dir"] / "checkpoints")]
    assert steps == [54, 56, 58, 60]  # keep_last=4, the newest ones


def test_resumed_run_ends_where_the_uninterrupted_run_ends(runs):
    """Equal final weights need the step (learning rate), the Adam moments and the data
    position all restored: any one of them lost changes the weights."""
    resumed = keras.saving.load_model(OutputDir(runs["run_dir"]).final_model)
    reference = runs["reference"].model
    assert max_abs_difference(resumed.get_weights(), reference.get_weights()) < 1e-5


def test_half_written_checkpoint_is_ignored(runs):
    """A kill during a write leaves files that the state file does not list yet."""
    checkpoint_dir = runs["run_dir"] / "checkpoints"
    (checkpoint_dir / "ckpt-62.index").write_bytes(b"\x00garbage")
    (checkpoint_dir / "ckpt-62_temp").mkdir()
    config = TrainingConfig.from_dict(_config(runs["run_dir"], runs["corpus"]))
    run = runs["reference"]
    model = keras.saving.load_model(OutputDir(runs["run_dir"]).final_model)
    from keras_transformer import build_optimizer

    optimizer = build_optimizer(model.config.d_model, config.schedule.warmup_steps)
    optimizer.build(model.trainable_variables)
    checkpointer = Checkpointer(checkpoint_dir, model, optimizer, write=False)
    assert checkpointer.latest.endswith("ckpt-60")
    assert checkpointer.restore_latest() == TRAIN_STEPS
    assert run.step == TRAIN_STEPS


def test_finished_run_is_not_trained_again(runs):
    result = train(_config(runs["run_dir"], runs["corpus"]))
    assert result.resumed_from_step == TRAIN_STEPS and result.step == TRAIN_STEPS
    assert result.history == {}


def test_list_checkpoints_with_a_relative_directory(tmp_path, monkeypatch):
    # Runs are usually given as relative paths (runs/quickstart): the listed prefixes must
    # point at the files, not at the directory joined twice.
    import tensorflow as tf

    from keras_transformer.training import list_checkpoints

    monkeypatch.chdir(tmp_path)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)),
                                         "runs/x/checkpoints", max_to_keep=3)
    for _ in range(2):
        manager.save()
    listed = list_checkpoints("runs/x/checkpoints")
    assert listed == ["runs/x/checkpoints/ckpt-1", "runs/x/checkpoints/ckpt-2"]
    assert all(tf.io.gfile.exists(prefix + ".index") for prefix in listed)
