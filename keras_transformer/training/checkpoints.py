"""Checkpoints that survive a crash: every N minutes and/or steps, the last K kept (paper 6.1).

A checkpoint is a `tf.train.Checkpoint` of the model weights (`model`: every variable of the
Transformer under its Keras path, e.g. `encoder/layer_0/feed_forward/inner/kernel`), the
optimizer state (`optimizer`: Adam moments, iteration count, loss scale) and the progress
counters (`tokens_seen`, `loss_seen`, `micro_batches_seen`: the data position), written as
`checkpoints/ckpt-STEP.index` and `ckpt-STEP.data-*`. Weights are keyed by path rather than
through the model object because TensorFlow's object tracking does not see every sub-layer of
a Keras 3 functional model; by path, averaging and other tools can read them without the
optimizer (`model_variables`).

Why a crash cannot corrupt one: TensorFlow writes a checkpoint's files under temporary names
and renames them into place, and only then rewrites the small `checkpoints/checkpoint` state
file (also atomically: temporary file + rename) that lists the complete checkpoints. Restoring
reads that list, so a process killed in the middle of a write resumes from the previous
checkpoint, and the half-written files are overwritten when that step is saved again. Old
checkpoints beyond `keep_last` are deleted only after a newer one is listed.
"""

import os
import time

import keras
import tensorflow as tf

from keras_transformer.errors import UserInputError
from keras_transformer.training.training_model import read_value


def model_variables(transformer):
    """The model's variables by Keras path: what a checkpoint saves under `model`.

    Example:
        >>> tf.train.Checkpoint(model=model_variables(model)).read(path)  # doctest: +SKIP
    """
    return {variable.path: variable.value for variable in transformer.weights}


class Checkpointer:
    """Saves and restores the training state of one run.

    Args:
        directory: the run's `checkpoints/` folder.
        transformer: the `Transformer` being trained.
        optimizer: its optimizer (built: its variables exist).
        counters: a dict of name -> variable to save beside them (e.g. `micro_batches_seen`).
        keep_last: checkpoints kept on disk.
        write: whether this process writes (False on non-chief workers, which only restore).

    Example:
        >>> checkpointer = Checkpointer("runs/x/checkpoints", model, optimizer)  # doctest: +SKIP
        >>> step = checkpointer.restore_latest()   # 0 when there is none  # doctest: +SKIP
        >>> checkpointer.save(step=1000)  # doctest: +SKIP
    """

    def __init__(self, directory, transformer, optimizer, counters=None, keep_last=5,
                 write=True):
        self.directory = os.fspath(directory)
        self.optimizer = optimizer
        self.write = write
        counters = {name: getattr(v, "value", v) for name, v in (counters or {}).items()}
        self.checkpoint = tf.train.Checkpoint(model=model_variables(transformer),
                                              optimizer=optimizer, **counters)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, self.directory, max_to_keep=keep_last, checkpoint_name="ckpt"
        ) if write else None

    @property
    def latest(self):
        """Path prefix of the newest complete checkpoint, or None."""
        return tf.train.latest_checkpoint(self.directory)

    def restore_latest(self):
        """Restores the newest complete checkpoint, if any; returns its optimizer step.

        Raises:
            UserInputError: when the checkpoint was written by a different model.
        """
        path = self.latest
        if path is None:
            return 0
        status = self.checkpoint.restore(path)
        try:
            status.assert_existing_objects_matched()
        except (AssertionError, ValueError) as error:
            raise UserInputError(
                f"checkpoint {path} does not match this model ({error}); it was written by a "
                "run with another model config: use a new output_dir, or the config of that "
                "run"
            ) from None
        return int(read_value(self.optimizer.iterations))

    def save(self, step):
        """Writes a checkpoint named by `step` (no-op where this process does not write)."""
        if not self.write:
            return None
        return self.manager.save(checkpoint_number=int(step))


def list_checkpoints(directory):
    """Complete checkpoints in `directory`, oldest first, from its `checkpoint` state file.

    Example:
        >>> list_checkpoints("runs/x/checkpoints")  # doctest: +SKIP
        ['runs/x/checkpoints/ckpt-9000', 'runs/x/checkpoints/ckpt-10000']
    """
    state = tf.train.get_checkpoint_state(os.fspath(directory))
    if state is None:
        return []
    # get_checkpoint_state already joins relative entries to `directory` (a relative
    # `directory` gives relative paths, which must not be joined a second time).
    return list(state.all_model_checkpoint_paths)


class CheckpointCallback(keras.callbacks.Callback):
    """Saves a checkpoint every `every_minutes` of wall time and/or every `every_steps`
    updates, and once more when training ends.

    Args:
        checkpointer: a `Checkpointer`.
        every_minutes: minutes between checkpoints (None: not by time).
        every_steps: updates between checkpoints (None: not by steps).
    """

    def __init__(self, checkpointer, every_minutes=10.0, every_steps=None):
        super().__init__()
        self.checkpointer = checkpointer
        self.every_seconds = None if every_minutes is None else every_minutes * 60.0
        self.every_steps = every_steps
        self._last_time = None
        self._last_step = None

    def _step(self):
        return int(read_value(self.model.optimizer.iterations))

    def on_train_begin(self, logs=None):
        self._last_time = time.monotonic()
        self._last_step = self._step()

    def on_train_batch_end(self, batch, logs=None):
        step = self._step()
        due_by_steps = self.every_steps is not None and step % self.every_steps == 0
        due_by_time = (self.every_seconds is not None
                       and time.monotonic() - self._last_time >= self.every_seconds)
        if (due_by_steps or due_by_time) and step != self._last_step:
            self._save(step)

    def on_train_end(self, logs=None):
        step = self._step()
        if step != self._last_step:
            self._save(step)

    def _save(self, step):
        self.checkpointer.save(step)
        self._last_time = time.monotonic()
        self._last_step = step
