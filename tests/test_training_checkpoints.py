"""Checkpoints: what a checkpoint holds, the time and step triggers (with a controlled clock),
and restarts past a half-written, corrupt or truncated newest checkpoint.

The SIGKILL-and-restart test of a whole run is tests/test_training_resume.py."""

import logging
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TransformerConfig, build_model, build_optimizer
from keras_transformer.errors import UserInputError
from keras_transformer.runs import checkpoints as checkpoint_files
from keras_transformer.runs.checkpoints import Checkpointer, list_checkpoints
from keras_transformer.training import CheckpointCallback, train
from keras_transformer.training import checkpoints as checkpoints_module
from tests._training_fixtures import tiny_config, write_reverse_corpus

MODEL = TransformerConfig(
    vocab_size=40, num_layers=1, d_model=32, d_ff=64, num_heads=4, dropout=0.1
)


def _model_and_optimizer():
    transformer = build_model(MODEL)
    optimizer = build_optimizer(MODEL.d_model)
    optimizer.build(transformer.trainable_variables)
    return transformer, optimizer


def _write_steps(directory, steps, keep_last=5):
    """Checkpoints at `steps`; at step s every weight is s and the seed states [s, s].
    Returns the transformer."""
    transformer, optimizer = _model_and_optimizer()
    checkpointer = Checkpointer(directory, transformer, optimizer, keep_last=keep_last)
    for step in steps:
        for variable in transformer.weights:
            variable.assign(np.full(variable.shape, step, variable.dtype))
        for state in checkpoint_files.seed_generator_states(transformer).values():
            state.assign([step, step])
        optimizer.iterations.assign(step)
        checkpointer.save(step)
    return transformer


def _fresh_checkpointer(directory, write=True):
    transformer, optimizer = _model_and_optimizer()
    return Checkpointer(directory, transformer, optimizer, write=write), transformer


def test_a_checkpoint_restores_weights_step_and_seed_generators(tmp_path):
    _write_steps(tmp_path, [3, 7])
    checkpointer, transformer = _fresh_checkpointer(tmp_path)
    assert checkpointer.restore_latest() == 7
    assert all(np.all(keras.ops.convert_to_numpy(v) == 7) for v in transformer.weights)
    states = checkpoint_files.seed_generator_states(transformer)
    # One generator per dropout layer with a rate: 3 in the encoder layer (2 residual, 1
    # embedding), 4 in the decoder (3 residual, 1 embedding).
    assert len(states) == 7
    assert all(list(state.numpy()) == [7, 7] for state in states.values())


def test_checkpoint_without_seed_generators_resumes_with_a_warning(tmp_path, caplog):
    """Checkpoints written before seed generators were saved still resume."""
    transformer, optimizer = _model_and_optimizer()
    optimizer.iterations.assign(5)
    old_format = tf.train.Checkpoint(
        model=checkpoint_files.model_variables(transformer), optimizer=optimizer
    )
    tf.train.CheckpointManager(
        old_format, str(tmp_path), max_to_keep=2, checkpoint_name="ckpt"
    ).save(checkpoint_number=5)
    checkpointer, _ = _fresh_checkpointer(tmp_path)
    with caplog.at_level(logging.WARNING, logger=checkpoint_files.__name__):
        assert checkpointer.restore_latest() == 5
    assert any("holds no dropout seed-generator state" in r.getMessage() for r in caplog.records)


def test_checkpoint_without_train_seconds_resumes_with_a_warning(tmp_path, caplog):
    """Checkpoints written before the training time was saved: the time limit counts from
    this start, and the rest (weights, step, seed generators) resumes."""
    _write_steps(tmp_path, [4])
    transformer, optimizer = _model_and_optimizer()
    train_seconds = keras.Variable(7.0, dtype="float64", trainable=False)
    checkpointer = Checkpointer(
        tmp_path, transformer, optimizer, counters={"train_seconds": train_seconds}
    )
    with caplog.at_level(logging.WARNING, logger=checkpoint_files.__name__):
        assert checkpointer.restore_latest() == 4
    assert any("holds no training time" in r.getMessage() for r in caplog.records)
    assert float(train_seconds.numpy()) == 7.0
    assert all(
        list(state.numpy()) == [4, 4]
        for state in checkpoint_files.seed_generator_states(transformer).values()
    )
    # Saved from now on, and restored by the next start.
    train_seconds.assign(42.5)
    optimizer.iterations.assign(5)
    checkpointer.save(5)
    transformer, optimizer = _model_and_optimizer()
    restored = keras.Variable(0.0, dtype="float64", trainable=False)
    assert (
        Checkpointer(
            tmp_path, transformer, optimizer, counters={"train_seconds": restored}
        ).restore_latest()
        == 5
    )
    assert float(restored.numpy()) == 42.5


def test_half_written_checkpoint_is_ignored(tmp_path):
    """A kill during a write leaves files that the state file does not list yet."""
    _write_steps(tmp_path, [1, 2])
    (tmp_path / "ckpt-3.index").write_bytes(b"\x00garbage")
    (tmp_path / "ckpt-3_temp").mkdir()
    checkpointer, _ = _fresh_checkpointer(tmp_path, write=False)
    assert checkpointer.latest.endswith("ckpt-2")
    assert checkpointer.restore_latest() == 2


@pytest.mark.parametrize("damage", ["truncated_data", "garbage_index", "missing_data"])
def test_unreadable_newest_checkpoint_falls_back_to_the_previous(tmp_path, caplog, damage):
    _write_steps(tmp_path, [1, 2, 3])
    [data_file] = tf.io.gfile.glob(str(tmp_path / "ckpt-3.data-*"))
    if damage == "truncated_data":
        size = os.path.getsize(data_file)
        with open(data_file, "r+b") as file:
            file.truncate(size // 2)
    elif damage == "garbage_index":
        (tmp_path / "ckpt-3.index").write_bytes(os.urandom(200))
    else:
        os.remove(data_file)
    checkpointer, transformer = _fresh_checkpointer(tmp_path)
    with caplog.at_level(logging.WARNING, logger=checkpoint_files.__name__):
        assert checkpointer.restore_latest() == 2
    assert all(np.all(keras.ops.convert_to_numpy(v) == 2) for v in transformer.weights)
    assert all(
        list(s.numpy()) == [2, 2]
        for s in checkpoint_files.seed_generator_states(transformer).values()
    )
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"{tmp_path}/ckpt-3 cannot be read" in message for message in warnings)
    # Set aside, not deleted, and no longer listed (averaging must not read it).
    assert os.path.exists(tmp_path / "corrupt" / "ckpt-3.index")
    assert [os.path.basename(p) for p in list_checkpoints(tmp_path)] == ["ckpt-1", "ckpt-2"]
    # The run goes on: the next save of step 3 is a new, readable checkpoint (of the state
    # restored here, at step 2).
    checkpointer.save(3)
    again, _ = _fresh_checkpointer(tmp_path)
    assert again.restore_latest() == 2 and again.restored_path.endswith("ckpt-3")


def test_no_readable_checkpoint_is_an_error_that_moves_nothing(tmp_path):
    _write_steps(tmp_path, [1, 2])
    for index in tf.io.gfile.glob(str(tmp_path / "ckpt-*.index")):
        with open(index, "wb") as file:
            file.write(b"\x00" * 10)
    checkpointer, _ = _fresh_checkpointer(tmp_path)
    with pytest.raises(UserInputError, match="none of the checkpoints .* can be read"):
        checkpointer.restore_latest()
    assert not os.path.exists(tmp_path / "corrupt")
    assert len(list_checkpoints(tmp_path)) == 2


class _Clock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


class _Recorder:
    def __init__(self):
        self.steps = []

    def save(self, step):
        self.steps.append(step)


class _Model:
    def __init__(self):
        self.optimizer = keras.optimizers.SGD()
        self.optimizer.build([keras.Variable(0.0)])


def _drive(callback, seconds_per_step, steps, clock):
    """Runs the callback through `steps` updates of `seconds_per_step` each."""
    model = _Model()
    callback.set_model(model)
    callback.on_train_begin()
    for batch in range(steps):
        clock.now += seconds_per_step[batch % len(seconds_per_step)]
        model.optimizer.iterations.assign_add(1)
        callback.on_train_batch_end(batch)
    callback.on_train_end()


def test_time_trigger_saves_when_the_clock_passes_every_minutes():
    clock, saved = _Clock(), _Recorder()
    # 70 s per update: 10 minutes pass during update 9 (630 s), then 18 (1260 s: 630 s after
    # the save), 27; the end of training saves update 30.
    _drive(CheckpointCallback(saved, every_minutes=10, clock=clock), [70], 30, clock)
    assert saved.steps == [9, 18, 27, 30]


def test_time_trigger_on_the_exact_minute_and_with_irregular_updates():
    clock, saved = _Clock(), _Recorder()
    # Updates of 60 s reach 600 s exactly at update 10: due (>=).
    _drive(CheckpointCallback(saved, every_minutes=10, clock=clock), [60], 25, clock)
    assert saved.steps == [10, 20, 25]
    clock, saved = _Clock(), _Recorder()
    # 1 s, 1 s, then a 700 s update (an evaluation): save after it; the interval restarts.
    _drive(CheckpointCallback(saved, every_minutes=10, clock=clock), [1, 1, 700], 6, clock)
    assert saved.steps == [3, 6]


def test_time_and_step_triggers_together():
    clock, saved = _Clock(), _Recorder()
    # Every 4 updates, or every 5 minutes at 100 s per update (3 updates after a save);
    # a step save restarts the time interval too.
    callback = CheckpointCallback(saved, every_minutes=5, every_steps=4, clock=clock)
    _drive(callback, [100], 13, clock)
    assert saved.steps == [3, 4, 7, 8, 11, 12, 13]


def test_train_checkpoints_every_minutes(tmp_path, monkeypatch):
    """`checkpoints.every_minutes` reaches the callback of `train`: with a clock that
    advances 4 minutes per reading, a save is due at every second update."""

    class FakeTime:
        now = 0.0

        @classmethod
        def monotonic(cls):
            cls.now += 240.0
            return cls.now

        strftime = staticmethod(__import__("time").strftime)

    monkeypatch.setattr(checkpoints_module, "time", FakeTime)
    corpus = write_reverse_corpus(tmp_path / "corpus", train_lines=100, dev_lines=5)
    config = tiny_config(
        tmp_path / "run",
        corpus,
        data={"dev": None},
        schedule={"train_steps": 7, "eval_every_steps": 7},
        checkpoints={"every_minutes": 7, "every_steps": None, "keep_last": 10, "average_last": 0},
    )
    train(config)
    # Readings: begin (240 s); update 1 (480: 240 s later, not due); update 2 (720: due,
    # 480 s >= 420); after the save the clock reads again (960), so the pattern repeats.
    steps = [int(p.rsplit("-", 1)[1]) for p in list_checkpoints(tmp_path / "run" / "checkpoints")]
    assert steps == [2, 4, 6, 7]


def test_list_checkpoints_with_a_relative_directory(tmp_path, monkeypatch):
    # Runs are usually given as relative paths (runs/quickstart): the listed prefixes must
    # point at the files, not at the directory joined twice.
    monkeypatch.chdir(tmp_path)
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(v=tf.Variable(1.0)), "runs/x/checkpoints", max_to_keep=3
    )
    for _ in range(2):
        manager.save()
    listed = list_checkpoints("runs/x/checkpoints")
    assert listed == ["runs/x/checkpoints/ckpt-1", "runs/x/checkpoints/ckpt-2"]
    assert all(tf.io.gfile.exists(prefix + ".index") for prefix in listed)
