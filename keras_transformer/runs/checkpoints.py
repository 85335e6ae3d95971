"""Checkpoints that survive a crash: every N minutes and/or steps, the last K kept (paper 6.1).

A checkpoint is a `tf.train.Checkpoint` of every piece of state that decides what training
does next, written as `checkpoints/ckpt-STEP.index` and `ckpt-STEP.data-*`:

- `model`: every variable of the Transformer under its Keras path (e.g.
  `encoder/layer_0/feed_forward/inner/kernel`);
- `optimizer`: Adam moments, iteration count (the step, hence the learning rate), loss scale;
- `seed_generators`: the state of every dropout layer's `keras.random.SeedGenerator`, so that
  a resumed run draws the dropout masks the uninterrupted run would have drawn;
- the counters `tokens_seen`, `loss_seen`, `micro_batches_seen` (logs, and the data position
  for runs that resume by skipping) and `train_seconds` (training wall time over all starts,
  for `schedule.max_train_minutes`);
- `data_iterator` (one-worker runs): the training `tf.data` iterator itself (shuffle buffer,
  shuffle RNG, partly filled length buckets, epoch), so that a resumed run continues from the
  next batch without re-reading the data consumed so far. Under a strategy on one host it is
  a `CheckpointableFeed`'s host iterator and the batches it had handed on but not trained on
  (tf.distribute's own iterators cannot be checkpointed). Multi-worker runs resume by
  skipping `micro_batches_seen` batches instead: as exact, but slower the further the run got.

There is no accumulation state to save: one update is one `fit` step that takes all its
micro-batches at once (`accumulation.py`), so a checkpoint never falls inside an update.

Weights are keyed by path rather than through the model object because TensorFlow's object
tracking does not see every sub-layer of a Keras 3 functional model; by path, averaging and
other tools can read them without the optimizer (`model_variables`). Seed generators have no
stable path (their names come from a per-process counter), so they are keyed by their order
in the model's layer tree, which the model config fixes.

Why a crash cannot corrupt one: TensorFlow writes a checkpoint's files under temporary names
and renames them into place, and only then rewrites the small `checkpoints/checkpoint` state
file (also atomically: temporary file + rename) that lists the complete checkpoints. Restoring
reads that list, so a process killed in the middle of a write resumes from the previous
checkpoint, and the half-written files are overwritten when that step is saved again. Old
checkpoints beyond `keep_last` are deleted only after a newer one is listed. A listed
checkpoint that cannot be read (a disk error, a truncated copy) is moved to
`checkpoints/corrupt/` with a warning and the previous one is restored instead.
"""

import contextlib
import functools
import logging
import os
import shutil
import time

import tensorflow as tf
from google.protobuf.message import DecodeError

from keras_transformer._keras_internals import flatten_layers, read_value, seed_generators
from keras_transformer.errors import UserInputError

logger = logging.getLogger(__name__)

# What a failed read of a damaged checkpoint raises: DataLossError (checksum, bad table),
# NotFoundError (a missing data shard) and other OpErrors, IndexError ("Read less bytes than
# requested": a truncated file), DecodeError (a damaged object graph). A ValueError (a tensor
# of another shape) or a failed match means another model instead, not damage.
_READ_ERRORS = (tf.errors.OpError, IndexError, DecodeError)

# State that checkpoints hold since some version, and what resuming from an older one without
# it means.
_ADDED_LATER = {
    "seed_generators": "holds no dropout seed-generator state (an older format): training "
    "resumes with fresh dropout streams, so not exactly as an "
    "uninterrupted run",
    "train_seconds": "holds no training time (an older format): schedule.max_train_minutes "
    "counts from this start",
}


def model_variables(transformer):
    """The model's variables by Keras path: what a checkpoint saves under `model`.

    Example:
        >>> tf.train.Checkpoint(model=model_variables(model)).read(path)  # doctest: +SKIP
    """
    return {variable.path: variable.value for variable in transformer.weights}


def seed_generator_states(transformer):
    """The state variables of every `keras.random.SeedGenerator` of the model's layers.

    Keras 3 dropout layers draw their masks from their own seed generator, whose state (a
    small integer variable, advanced at every call in training) is not among the model's
    `weights`. Keys are the generators' positions in the layer tree (`"0"`, `"1"`, ...).
    Keras's global seed generator is not included: nothing in the model or the train step
    draws from it (every random op of the model is seeded by its layer's generator).

    Example:
        >>> sorted(seed_generator_states(model))[:2]  # doctest: +SKIP
        ['0', '1']
    """
    states = {}
    seen = set()
    for layer in flatten_layers(transformer):
        for generator in seed_generators(layer):
            if id(generator) not in seen:
                seen.add(id(generator))
                states[str(len(states))] = generator.state.value
    return states


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

    def __init__(self, directory, transformer, optimizer, counters=None, keep_last=5, write=True):
        self.directory = os.fspath(directory)
        self.optimizer = optimizer
        self.write = write
        self.keep_last = keep_last
        self._objects = {
            "model": model_variables(transformer),
            "optimizer": optimizer,
            **{name: getattr(v, "value", v) for name, v in (counters or {}).items()},
        }
        seeds = seed_generator_states(transformer)
        if seeds:
            self._objects["seed_generators"] = seeds
        self.data_iterator = None
        self.restored_path = None
        # Entered around every save: a `CheckpointableFeed` holds its data still in it.
        self.save_guard = contextlib.nullcontext
        self._new_checkpoint()

    def _new_checkpoint(self):
        # A fresh Checkpoint object per restore attempt: a failed attempt leaves nothing
        # (no deferred restoration) behind that could leak into the next one.
        objects = dict(self._objects)
        if self.data_iterator is not None:
            objects["data_iterator"] = self.data_iterator
        self.checkpoint = tf.train.Checkpoint(**objects)
        self.manager = (
            tf.train.CheckpointManager(
                self.checkpoint, self.directory, max_to_keep=self.keep_last, checkpoint_name="ckpt"
            )
            if self.write
            else None
        )

    @property
    def latest(self):
        """Path prefix of the newest complete checkpoint, or None."""
        return tf.train.latest_checkpoint(self.directory)

    def restore_latest(self):
        """Restores the newest readable checkpoint, if any; returns its optimizer step.

        A listed checkpoint that cannot be read (corrupt or truncated files) is reported
        with a warning and the one before it is restored; the bad one's files are moved to
        `checkpoints/corrupt/` (by the writing process) so that they are neither read again
        nor overwritten, and can be inspected.

        Raises:
            UserInputError: when the checkpoint was written by a different model, or when no
                listed checkpoint can be read (then nothing is moved).
        """
        paths = list_checkpoints(self.directory)
        if not paths:
            return 0
        bad = []
        for path in reversed(paths):
            try:
                checkpoint = self.checkpoint
                missing = [
                    name
                    for name in _ADDED_LATER
                    if name in self._objects and not _has_key(path, name + "/")
                ]
                for name in missing:
                    logger.warning("checkpoint %s %s", path, _ADDED_LATER[name])
                seeds = self._objects.get("seed_generators")
                if seeds and "seed_generators" not in missing:
                    saved = _child_count(path, "seed_generators/")
                    if saved != len(seeds):
                        # Dropout was switched on or off for some layers (a run may go on
                        # under new dropout: trainer.TRAINING_ONLY_FIELDS); the saved
                        # streams no longer line up with the layers, so none is restored.
                        logger.warning(
                            "checkpoint %s holds %d dropout seed generators, the "
                            "model has %d (its dropout changed): training resumes "
                            "with fresh dropout streams",
                            path,
                            saved,
                            len(seeds),
                        )
                        missing.append("seed_generators")
                if missing:  # an older format or other dropout: resume all the rest
                    checkpoint = tf.train.Checkpoint(
                        **{
                            name: value
                            for name, value in self._objects.items()
                            if name not in missing
                        }
                    )
                status = checkpoint.restore(path)
                status.assert_existing_objects_matched()
                # The data iterator, when saved, is restored later (attach_data_iterator).
                status.expect_partial()
            except (AssertionError, ValueError) as error:
                raise UserInputError(
                    f"checkpoint {path} does not match this model ({error}); it was written "
                    "by a run with another model config: use a new output_dir, or the config "
                    "of that run"
                ) from None
            except _READ_ERRORS as error:
                logger.warning(
                    "checkpoint %s cannot be read (%s: %s); falling back to the "
                    "previous checkpoint",
                    path,
                    type(error).__name__,
                    str(error).splitlines()[0][:300],
                )
                bad.append(path)
                self._new_checkpoint()
                continue
            if bad:
                self._set_aside(bad, paths, path)
            self.restored_path = path
            return int(read_value(self.optimizer.iterations))
        raise UserInputError(
            f"none of the checkpoints in {self.directory} can be read ({', '.join(paths)}); "
            "they were left in place: restore a backup copy, or use a new output_dir to train "
            "from scratch"
        )

    def _set_aside(self, bad, paths, restored):
        """Moves unreadable checkpoints to `corrupt/` and lists only the readable ones."""
        if not self.write:
            return
        corrupt_dir = os.path.join(self.directory, "corrupt")
        os.makedirs(corrupt_dir, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for path in bad:
            for name in tf.io.gfile.glob(path + ".*"):
                destination = os.path.join(corrupt_dir, os.path.basename(name))
                if os.path.exists(destination):  # the same step was set aside before
                    destination += "." + stamp
                shutil.move(name, destination)
            logger.warning("moved the unreadable checkpoint %s to %s", path, corrupt_dir)
        keep = [path for path in paths if path not in bad]
        keep = keep[: keep.index(restored) + 1]
        # The state file lists the readable ones only (written atomically, as the manager
        # writes it); the manager made next re-reads it.
        tf.compat.v1.train.update_checkpoint_state(
            self.directory, model_checkpoint_path=restored, all_model_checkpoint_paths=keep
        )
        self._new_checkpoint()

    def attach_data_iterator(self, iterator):
        """Saves `iterator` (a `tf.data.Iterator`) with every later checkpoint, and gives it
        the position of the restored checkpoint when that holds one.

        Returns:
            True when the iterator was restored (the caller must not skip batches).
        """
        self.data_iterator = iterator
        self._new_checkpoint()
        if self.restored_path is None or not has_data_iterator(self.restored_path):
            return False
        tf.train.Checkpoint(data_iterator=iterator).read(self.restored_path).expect_partial()
        return True

    def save(self, step):
        """Writes a checkpoint named by `step` (no-op where this process does not write)."""
        if not self.write:
            return None
        with self.save_guard():
            return self.manager.save(checkpoint_number=int(step))


def has_data_iterator(path):
    """Whether the checkpoint at `path` holds the training data iterator's position."""
    return _has_key(path, "data_iterator/")


def has_data_feed(path):
    """Whether the checkpoint at `path` holds a `CheckpointableFeed`'s position (the data
    position of a run under a tf.distribute strategy)."""
    return _has_key(path, "data_iterator/pending")


def _has_key(path, prefix):
    return any(name.startswith(prefix) for name in _variable_names(path))


def _variable_names(path):
    """The names the checkpoint at `path` holds, listed once per version of its index file
    (a restore asks several questions of one checkpoint)."""
    index = path + ".index"
    version = os.stat(index).st_mtime_ns if os.path.exists(index) else None
    return _listed_names(path, version)


@functools.lru_cache(maxsize=8)
def _listed_names(path, version):
    return tuple(name for name, _ in tf.train.list_variables(path))


def _child_count(path, prefix):
    """How many objects the checkpoint holds directly under `prefix` ("seed_generators/")."""
    return len(
        {
            name[len(prefix) :].split("/")[0]
            for name in _variable_names(path)
            if name.startswith(prefix)
        }
    )


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
