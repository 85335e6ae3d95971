"""Callbacks of a training run: stop at the last step or the time limit, stop on NaN, log to
TensorBoard.

All read the `TrainingModel` counters (optimizer iterations, `tokens_seen`, `loss_seen`), so
their numbers stay right across restarts.
"""

import json
import math
import os
import time

import keras
import tensorflow as tf

from keras_transformer.files import atomic_write
from keras_transformer.training.training_model import read_value


class TrainingDivergedError(RuntimeError):
    """The loss became NaN or infinite: training stopped before writing bad weights."""


def _step(model):
    return int(read_value(model.optimizer.iterations))


class StopAtStep(keras.callbacks.Callback):
    """Ends training after update `train_steps` (the last Keras epoch may be partial).

    Args:
        train_steps: the last optimizer update.
    """

    def __init__(self, train_steps):
        super().__init__()
        self.train_steps = train_steps

    def on_train_batch_end(self, batch, logs=None):
        if _step(self.model) >= self.train_steps:
            self.model.stop_training = True


class StopAfterMinutes(keras.callbacks.Callback):
    """Keeps `train_seconds` current and ends training at the first update that finishes
    `max_minutes` of training wall time, counted over every start of the run (as fairseq's
    `--stop-time-hours`): a time limit that holds on a slow machine as on a fast one.

    `train_seconds` is saved with every checkpoint, so a resumed run goes on counting where
    its checkpoint left off (the time between that checkpoint and an interruption is not
    counted twice). Time spent in dev evaluations and checkpoint writes counts: the limit is
    on the wall time of training.

    Args:
        max_minutes: the limit (None: no limit; `train_seconds` is still kept).
        train_seconds: a float64 variable, seconds trained before this start.
        clock: a function returning seconds (default `time.monotonic`; tests pass their own).
    """

    def __init__(self, max_minutes, train_seconds, clock=None):
        super().__init__()
        self.max_seconds = None if max_minutes is None else max_minutes * 60.0
        self.train_seconds = train_seconds
        self.clock = clock or time.monotonic
        self._started = self._before = None

    def on_train_begin(self, logs=None):
        self._started = self.clock()
        self._before = float(read_value(self.train_seconds))

    def on_train_batch_end(self, batch, logs=None):
        elapsed = self._before + self.clock() - self._started
        self.train_seconds.assign(elapsed)
        if self.max_seconds is not None and elapsed >= self.max_seconds:
            self.model.stop_training = True


class NaNGuard(keras.callbacks.Callback):
    """Stops training with a clear message as soon as the training loss is not finite.

    It runs before the checkpoint callback, so no checkpoint with NaN weights is written.

    Args:
        last_checkpoint: a function returning the newest checkpoint path (for the message).
    """

    def __init__(self, last_checkpoint=None):
        super().__init__()
        self.last_checkpoint = last_checkpoint

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is None or math.isfinite(float(loss)):
            return
        self.model.stop_training = True
        step = _step(self.model)
        learning_rate = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
        checkpoint = self.last_checkpoint() if self.last_checkpoint else None
        raise TrainingDivergedError(
            f"the training loss became {float(loss)} at step {step} (learning rate "
            f"{learning_rate:.3g}); training stopped without saving these weights. "
            f"The newest good checkpoint is {checkpoint or 'none'}. Common fixes: a longer "
            "schedule.warmup_steps or a smaller schedule.learning_rate_scale; precision "
            "mixed_bfloat16 instead of mixed_float16; check the data for empty or garbage "
            "lines. Rerunning the same command resumes from the checkpoint."
        )


class TrainingLogger(keras.callbacks.Callback):
    """TensorBoard scalars and `history.json`.

    Every `every_steps` updates, in `logs/train`: `loss` (token mean since the previous
    point), `learning_rate` and `tokens_per_second` (real target tokens trained on per second
    of wall time). After each evaluation, in `logs/dev`: `loss`, `perplexity`,
    `token_accuracy`; and the epoch's metrics appended to `history.json`.

    Args:
        log_dir: the run's `logs/` folder.
        history_path: the run's `history.json`.
        every_steps: updates between training points.
    """

    def __init__(self, log_dir, history_path, every_steps=100):
        super().__init__()
        self.every_steps = every_steps
        self.history_path = history_path
        self.train_writer = tf.summary.create_file_writer(os.path.join(log_dir, "train"))
        self.dev_writer = tf.summary.create_file_writer(os.path.join(log_dir, "dev"))
        self.last_tokens_per_second = None

    def _counters(self):
        return (
            float(read_value(self.model.tokens_seen)),
            float(read_value(self.model.loss_seen)),
            time.monotonic(),
        )

    def on_train_begin(self, logs=None):
        self._mark = self._counters()

    def on_train_batch_end(self, batch, logs=None):
        step = _step(self.model)
        if step % self.every_steps:
            return
        tokens, loss_sum, now = self._counters()
        last_tokens, last_loss_sum, last_time = self._mark
        self._mark = (tokens, loss_sum, now)
        new_tokens = tokens - last_tokens
        if new_tokens <= 0:
            return
        self.last_tokens_per_second = new_tokens / max(now - last_time, 1e-9)
        learning_rate = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
        with self.train_writer.as_default(step=step):
            tf.summary.scalar("loss", (loss_sum - last_loss_sum) / new_tokens)
            tf.summary.scalar("learning_rate", learning_rate)
            tf.summary.scalar("tokens_per_second", self.last_tokens_per_second)
        self.train_writer.flush()

    def on_epoch_end(self, epoch, logs=None):
        logs = {k: float(v) for k, v in (logs or {}).items()}
        step = _step(self.model)
        dev = {k[len("val_") :]: v for k, v in logs.items() if k.startswith("val_")}
        if dev:
            with self.dev_writer.as_default(step=step):
                for name, value in dev.items():
                    tf.summary.scalar(name, value)
            self.dev_writer.flush()
        history = []
        if os.path.exists(self.history_path):
            with open(self.history_path, encoding="utf-8") as file:
                history = json.load(file)
        entry = {"step": step, "tokens_seen": float(read_value(self.model.tokens_seen)), **logs}
        if self.last_tokens_per_second is not None:
            entry["tokens_per_second"] = self.last_tokens_per_second
        history.append(entry)
        with atomic_write(self.history_path) as file:
            json.dump(history, file, indent=1)

    def on_train_end(self, logs=None):
        self.train_writer.close()
        self.dev_writer.close()
