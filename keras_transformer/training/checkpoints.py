"""`CheckpointCallback`: when training writes a checkpoint (every N minutes and/or steps, and
at the end). What a checkpoint holds, and how it is saved and restored, is
`keras_transformer.runs.checkpoints`; its names are also importable from here.
"""

import time

import keras

from keras_transformer._keras_internals import read_value
from keras_transformer.runs.checkpoints import (  # noqa: F401  (their import path before runs/)
    Checkpointer,
    has_data_feed,
    has_data_iterator,
    list_checkpoints,
    model_variables,
    seed_generator_states,
)


class CheckpointCallback(keras.callbacks.Callback):
    """Saves a checkpoint every `every_minutes` of wall time and/or every `every_steps`
    updates, and once more when training ends.

    The time trigger fires at the end of the first update that finishes `every_minutes` or
    more after the previous save (or after training began), and restarts the interval there.

    Args:
        checkpointer: a `Checkpointer`.
        every_minutes: minutes between checkpoints (None: not by time).
        every_steps: updates between checkpoints (None: not by steps).
        clock: a function returning seconds (default `time.monotonic`; tests pass a
            controlled clock).

    Example:
        >>> callback = CheckpointCallback(checkpointer, every_minutes=10)  # doctest: +SKIP
        >>> model.fit(data, callbacks=[callback])  # doctest: +SKIP
    """

    def __init__(self, checkpointer, every_minutes=10.0, every_steps=None, clock=None):
        super().__init__()
        self.checkpointer = checkpointer
        self.every_seconds = None if every_minutes is None else every_minutes * 60.0
        self.every_steps = every_steps
        self.clock = clock or time.monotonic
        self._last_time = None
        self._last_step = None

    def _step(self):
        return int(read_value(self.model.optimizer.iterations))

    def on_train_begin(self, logs=None):
        self._last_time = self.clock()
        self._last_step = self._step()

    def on_train_batch_end(self, batch, logs=None):
        step = self._step()
        due_by_steps = self.every_steps is not None and step % self.every_steps == 0
        due_by_time = (
            self.every_seconds is not None and self.clock() - self._last_time >= self.every_seconds
        )
        if (due_by_steps or due_by_time) and step != self._last_step:
            self._save(step)

    def on_train_end(self, logs=None):
        step = self._step()
        if step != self._last_step:
            self._save(step)

    def _save(self, step):
        self.checkpointer.save(step)
        self._last_time = self.clock()
        self._last_step = step
