"""Callbacks: the NaN guard stops with a clear message and keeps the last good checkpoint;
training stops exactly at train_steps, or at the time limit counted over restarts; dev BLEU
keeps the best model and stops early."""

import json
import math

import keras
import pytest
import tensorflow as tf

from keras_transformer import TransformerConfig, build_model, build_optimizer
from keras_transformer.runs.checkpoints import list_checkpoints
from keras_transformer.training import (
    DevBleu,
    NaNGuard,
    StopAfterMinutes,
    StopAtStep,
    TrainingDivergedError,
    TrainingModel,
    train,
)
from tests._training_fixtures import tiny_config, write_reverse_corpus


@pytest.fixture(scope="module")
def model():
    config = TransformerConfig(vocab_size=40, num_layers=1, d_model=16, d_ff=32, num_heads=2)
    model = TrainingModel(build_model(config))
    model.compile(optimizer=build_optimizer(config.d_model, warmup_steps=10))
    model.optimizer.build(model.transformer.trainable_variables)
    return model


def test_nan_guard_message(model):
    guard = NaNGuard(last_checkpoint=lambda: "runs/x/checkpoints/ckpt-40")
    guard.set_model(model)
    guard.on_train_batch_end(0, {"loss": 3.5})  # finite: nothing happens
    assert not model.stop_training
    with pytest.raises(TrainingDivergedError) as error:
        guard.on_train_batch_end(0, {"loss": math.nan})
    message = str(error.value)
    assert "became nan at step 0" in message
    assert "runs/x/checkpoints/ckpt-40" in message
    assert "warmup_steps" in message and "resumes" in message
    assert model.stop_training


def test_stop_at_step(model):
    stop = StopAtStep(train_steps=3)
    stop.set_model(model)
    model.stop_training = False
    model.optimizer.iterations.assign(2)
    stop.on_train_batch_end(0)
    assert not model.stop_training
    model.optimizer.iterations.assign(3)
    stop.on_train_batch_end(0)
    assert model.stop_training
    model.optimizer.iterations.assign(0)


def test_stop_after_minutes_counts_the_time_of_earlier_starts(model):
    now = [1000.0]
    train_seconds = keras.Variable(90.0, dtype="float64", trainable=False)  # 1.5 min before
    stop = StopAfterMinutes(2, train_seconds, clock=lambda: now[0])
    stop.set_model(model)
    model.stop_training = False
    stop.on_train_begin()
    now[0] += 29.0  # 90 + 29 = 119 s of 120
    stop.on_train_batch_end(0)
    assert float(train_seconds.numpy()) == 119.0 and not model.stop_training
    now[0] += 1.0
    stop.on_train_batch_end(1)
    assert float(train_seconds.numpy()) == 120.0 and model.stop_training
    # No limit: the time is still kept, and training never stops for it.
    model.stop_training = False
    unlimited = StopAfterMinutes(None, train_seconds, clock=lambda: now[0])
    unlimited.set_model(model)
    unlimited.on_train_begin()
    now[0] += 3600.0
    unlimited.on_train_batch_end(0)
    assert float(train_seconds.numpy()) == 3720.0 and not model.stop_training


def test_time_limit_ends_a_run_as_finished_and_resumes_when_raised(tmp_path, caplog):
    corpus = write_reverse_corpus(tmp_path / "corpus", train_lines=100, dev_lines=10)
    # 6 ms: spent by the first update, whatever the machine.
    config = tiny_config(
        tmp_path / "run",
        corpus,
        data={"dev": None},
        schedule={"train_steps": 4, "max_train_minutes": 1e-4},
        checkpoints={"every_steps": 1, "average_last": 2},
    )
    first = train(config)
    assert first.step == 1 and first.stopped_by_time
    assert first.train_seconds >= 1e-4 * 60
    assert "stopped by schedule.max_train_minutes" in first.summary()
    # The final and averaged models are written as for a finished run; the checkpoint holds
    # the time trained.
    assert (tmp_path / "run" / "model.keras").exists()
    assert (tmp_path / "run" / "averaged.keras").exists()
    [checkpoint] = list_checkpoints(tmp_path / "run" / "checkpoints")
    saved = tf.train.load_checkpoint(checkpoint).get_tensor(
        "train_seconds/.ATTRIBUTES/VARIABLE_VALUE"
    )
    assert saved == pytest.approx(first.train_seconds)
    # The same command again: the time is spent, nothing more is trained.
    with caplog.at_level("INFO", logger="keras_transformer.training.trainer"):
        again = train(config)
    assert (again.step, again.resumed_from_step, again.history) == (1, 1, {})
    assert again.stopped_by_time and again.train_seconds == pytest.approx(first.train_seconds)
    assert any("max_train_minutes (0.0001) is spent" in r.getMessage() for r in caplog.records)
    # A raised limit trains on to train_steps and keeps counting from the saved time.
    config["schedule"]["max_train_minutes"] = 60
    raised = train(config)
    assert raised.step == 4 and raised.resumed_from_step == 1 and not raised.stopped_by_time
    assert raised.train_seconds > first.train_seconds
    keras.backend.clear_session()


def test_linear_decay_ends_at_the_time_limit_in_a_run(tmp_path, monkeypatch):
    """`schedule.decay: linear` with `max_train_minutes` reaches the trainer's optimizer: with
    a clock at 60 s per update and a 6-minute limit, the time binds before the 12 steps and
    the rate falls to 0 with it (hand values below), where steps alone would give 0.6 of the
    peak at the last update."""
    import keras_transformer.training.callbacks as callbacks_module

    class FakeTime:
        now = 0.0

        @classmethod
        def monotonic(cls):
            return cls.now

    class Record(keras.callbacks.Callback):
        rates = []

        def on_train_batch_begin(self, batch, logs=None):
            # The rate of the coming update; the clock reads the time that update will end.
            self.rates.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))
            FakeTime.now = 60.0 * (int(self.model.optimizer.iterations.numpy()) + 1)

    monkeypatch.setattr(callbacks_module, "time", FakeTime)
    corpus = write_reverse_corpus(tmp_path / "corpus", train_lines=100, dev_lines=5)
    config = tiny_config(
        tmp_path / "run",
        corpus,
        data={"dev": None},
        schedule={
            "train_steps": 12,
            "warmup_steps": 2,
            "decay": "linear",
            "max_train_minutes": 6,
            "eval_every_steps": 12,
        },
    )
    result = train(config, callbacks=[Record()])
    assert result.step == 6 and result.stopped_by_time
    # peak = (d_model 32 * warmup 2)^-0.5 = 0.125. Update u (1-based) sees 60 (u - 1) s of
    # the 360 spent: rate = peak * min(u / 2, (1 - max(u / 12, (u - 1) / 6)) / (1 - 2 / 12)):
    # u = 1: 0.5 (warmup); 2: 1.0; 3: (1 - 1/3) / (5/6) = 0.8; 4: 0.6; 5: 0.4; 6: 0.2.
    expected = [0.125 * f for f in (0.5, 1.0, 0.8, 0.6, 0.4, 0.2)]
    assert Record.rates == pytest.approx(expected, rel=1e-5)
    keras.backend.clear_session()


class _ScriptedBleu(DevBleu):
    """DevBleu with scores given in advance instead of decoding."""

    def __init__(self, scores, **options):
        super().__init__([], [], None, **options)
        self.scores = list(scores)

    def score(self):
        return self.scores.pop(0), 0.0


def test_dev_bleu_early_stopping_and_keep_best(model, tmp_path):
    best_model, best_record = str(tmp_path / "best.keras"), str(tmp_path / "best.json")
    callback = _ScriptedBleu(
        [10.0, 12.0, 11.0, 12.0, 9.0],
        patience=3,
        best_model_path=best_model,
        best_record_path=best_record,
    )
    callback.set_model(model)
    model.stop_training = False
    for epoch in range(4):
        logs = {}
        callback.on_epoch_end(epoch, logs)
        assert "val_bleu" in logs
        assert not model.stop_training
    assert json.loads(open(best_record).read())["bleu"] == 12.0
    callback.on_epoch_end(4, {})  # third evaluation in a row without a better BLEU
    assert model.stop_training
    model.stop_training = False
    # A restarted run remembers the best BLEU of its earlier part.
    resumed = _ScriptedBleu([11.5], best_model_path=best_model, best_record_path=best_record)
    assert resumed.best_bleu == 12.0


def test_divergence_stops_training_before_bad_checkpoints(tmp_path):
    corpus = write_reverse_corpus(tmp_path / "corpus", train_lines=100, dev_lines=10)
    # A learning rate of ~1e28 blows the weights up within a step or two.
    config = tiny_config(
        tmp_path / "run",
        corpus,
        data={"dev": None},
        schedule={"train_steps": 20, "learning_rate_scale": 1e30},
        checkpoints={"every_steps": 1, "average_last": 0},
    )
    with pytest.raises(TrainingDivergedError, match=r"the training loss became (nan|inf)"):
        train(config)
    steps = [int(p.rsplit("-", 1)[1]) for p in list_checkpoints(tmp_path / "run" / "checkpoints")]
    assert steps and max(steps) < 20
    # Every checkpoint that was written holds finite weights.
    from keras_transformer.runs.averaging import average_checkpoints

    newest = average_checkpoints(str(tmp_path / "run"), last=1)
    assert all(math.isfinite(float(abs(w).max())) for w in newest.get_weights())
    assert not (tmp_path / "run" / "model.keras").exists()
    keras.backend.clear_session()


# Dev BLEU by step (hand-picked): best 2.0 at step 4, then no better score, so patience 3
# stops an uninterrupted run after the evaluation of step 10.
_BLEU_BY_STEP = {2: 1.0, 4: 2.0, 6: 2.0, 8: 1.5, 10: 2.0, 12: 3.0, 14: 3.5, 16: 4.0}


class _Killed(Exception):
    pass


class _KillAt(keras.callbacks.Callback):
    """Ends the process's training as a kill would: no final checkpoint, no clean end."""

    def __init__(self, step, when):
        super().__init__()
        self.step, self.when = step, when

    def _maybe_kill(self):
        if int(self.model.optimizer.iterations.numpy()) == self.step:
            raise _Killed

    def on_train_batch_end(self, batch, logs=None):
        if self.when == "batch":
            self._maybe_kill()

    def on_epoch_end(self, epoch, logs=None):
        if self.when == "epoch":
            self._maybe_kill()


def test_early_stopping_stops_a_resumed_run_at_the_step_of_an_uninterrupted_one(
    tmp_path, monkeypatch
):
    def scripted_score(self):
        return _BLEU_BY_STEP[int(self.model.optimizer.iterations.numpy())], 0.0

    monkeypatch.setattr(DevBleu, "score", scripted_score)
    corpus = write_reverse_corpus(tmp_path / "corpus", train_lines=60, dev_lines=4)

    def config(name, every_steps):
        return tiny_config(
            tmp_path / name,
            corpus,
            schedule={"train_steps": 16, "eval_every_steps": 2},
            checkpoints={"every_steps": every_steps, "keep_last": 20},
            dev_bleu={"sentences": 2, "patience": 3},
        )

    assert train(config("whole", 2)).step == 10
    cases = [
        # Killed after the checkpoint of step 7: three evaluations (the last without a
        # better BLEU) came before it, and the resumed run's Keras epochs end at odd steps.
        ("between_evaluations", 1, _KillAt(7, "batch"), 7),
        # Killed after the evaluation of step 8, whose checkpoint is at step 6: the score of
        # step 6 (taken before its checkpoint) counts, that of step 8 comes again.
        ("after_evaluation", 3, _KillAt(8, "epoch"), 6),
    ]
    for name, every_steps, kill, restored in cases:
        with pytest.raises(_Killed):
            train(config(name, every_steps), callbacks=[kill])
        resumed = train(config(name, every_steps))
        assert (resumed.resumed_from_step, resumed.step) == (restored, 10), name
        history = json.loads((tmp_path / name / "dev_bleu.json").read_text())
        assert [(entry["step"], entry["bleu"]) for entry in history] == [
            (step, _BLEU_BY_STEP[step]) for step in (2, 4, 6, 8, 10)
        ]
    keras.backend.clear_session()
