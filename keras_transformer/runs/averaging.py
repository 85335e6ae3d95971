"""Checkpoint averaging (paper 6.1): "a single model obtained by averaging the last 5
checkpoints, which were written at 10-minute intervals" (base; the last 20 for big).

Only the model weights are averaged, elementwise, in float64; optimizer moments, step counters
and progress are not read. The result is a `Transformer` that translation and export load like
any other (`OutputDir.averaged_model`).
"""

import json
import os
import re

import numpy as np
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.errors import UserInputError
from keras_transformer.model import build_model
from keras_transformer.runs.checkpoints import list_checkpoints, model_variables
from keras_transformer.runs.layout import OutputDir


def average_checkpoints(checkpoints, last=5, config=None, last_fraction=None):
    """Averages the model weights of checkpoints into a new `Transformer`.

    Args:
        checkpoints: a run folder (`OUTPUT_DIR`), its `checkpoints/` folder, or a list of
            checkpoint path prefixes (`.../ckpt-1000`).
        last: with a folder, how many of its newest checkpoints to average (5 for base, 20
            for big); ignored for an explicit list.
        config: the model's `TransformerConfig` (default: the run folder's `config.json`).
        last_fraction: with a folder, average only those of the newest `last` written in
            this last fraction of the updates (`in_last_fraction`); `last` is then a cap.

    Returns:
        A `Transformer` (float32 weights) whose every weight is the mean of the checkpoints'.

    Raises:
        UserInputError: when there are no checkpoints, fewer than asked for, or the config
            cannot be found.

    Example:
        >>> model = average_checkpoints("runs/ende", last=5)  # doctest: +SKIP
        >>> model.save("runs/ende/averaged.keras")  # doctest: +SKIP
    """
    paths, run_dir = _resolve(checkpoints, last, last_fraction)
    if config is None:
        config = _read_config(run_dir)
    elif isinstance(config, dict):
        config = TransformerConfig.from_dict(config)

    model = build_model(config)
    restored = build_model(config)  # every checkpoint overwrites all of its weights
    sums = None
    for path in paths:
        status = tf.train.Checkpoint(model=model_variables(restored)).read(path)
        status.expect_partial()  # the optimizer and counters are deliberately not read
        try:
            status.assert_existing_objects_matched()
        except (AssertionError, ValueError) as error:
            raise UserInputError(
                f"checkpoint {path} does not match the model config ({error}); average "
                "checkpoints of one run, with that run's config.json"
            ) from None
        weights = [np.asarray(w, dtype=np.float64) for w in restored.get_weights()]
        sums = weights if sums is None else [s + w for s, w in zip(sums, weights)]
    model.set_weights([s / len(paths) for s in sums])
    model.averaged_checkpoints = list(paths)
    return model


def in_last_fraction(checkpoints, fraction):
    """The checkpoints written in the last `fraction` of the updates: those whose update
    number (`ckpt-N`) is above (1 - fraction) x the newest one's, which counts the updates
    trained. Always keeps the newest.

    Why: a run stopped by a time limit trains however many updates the machine allows, and
    the average that does best covers about the same share of them, not the same count
    (`pipelines/ptb_parsing.py`'s `CPU_AVERAGE_FRACTION`).

    Args:
        checkpoints: checkpoint path prefixes, oldest first (`list_checkpoints`).
        fraction: a share of the updates, above 0 and at most 1.

    Example:
        >>> in_last_fraction(["c/ckpt-6000", "c/ckpt-7000", "c/ckpt-7505"], 0.2)
        ['c/ckpt-7000', 'c/ckpt-7505']
    """
    if not 0 < fraction <= 1:
        raise UserInputError(
            f"the fraction of the updates to average must be above 0 and at most 1, got {fraction}"
        )
    steps = []
    for path in checkpoints:
        match = re.search(r"-(\d+)$", os.fspath(path))
        if match is None:
            raise UserInputError(
                f"{path!r} does not end in its update number (ckpt-N), so "
                "the updates it covers are unknown; give --last alone"
            )
        steps.append(int(match.group(1)))
    newest = max(steps, default=0)
    return [
        path
        for path, step in zip(checkpoints, steps)
        if step > (1 - fraction) * newest or step == newest
    ]


def _resolve(checkpoints, last, last_fraction=None):
    if isinstance(checkpoints, (str, os.PathLike)):
        folder = os.fspath(checkpoints)
        run_dir = folder
        if os.path.isdir(OutputDir(folder).checkpoint_dir):
            folder = OutputDir(folder).checkpoint_dir
        else:
            run_dir = os.path.dirname(os.path.normpath(folder))
        available = list_checkpoints(folder)
        if not available:
            raise UserInputError(
                f"no checkpoints in {folder!r}; give a training output_dir or its "
                "checkpoints/ folder"
            )
        if last < 1:
            raise UserInputError(f"--last must be at least 1, got {last}")
        if last_fraction is not None:
            return in_last_fraction(available[-last:], last_fraction), run_dir
        if len(available) < last:
            raise UserInputError(
                f"asked to average the last {last} checkpoints but {folder!r} holds "
                f"{len(available)}: lower --last or train longer (checkpoints.keep_last "
                "bounds how many are kept)"
            )
        return available[-last:], run_dir
    paths = [os.fspath(p) for p in checkpoints]
    if not paths:
        raise UserInputError("no checkpoints given to average")
    for path in paths:
        if not tf.io.gfile.exists(path + ".index"):
            raise UserInputError(
                f"{path!r} is not a checkpoint (no {path}.index); give path prefixes such "
                "as runs/x/checkpoints/ckpt-1000"
            )
    run_dir = os.path.dirname(os.path.dirname(os.path.abspath(paths[0])))
    return paths, run_dir


def _read_config(run_dir):
    path = OutputDir(run_dir).model_config
    if not os.path.isfile(path):
        raise UserInputError(
            f"cannot find the model config {path!r} beside the checkpoints; pass config="
        )
    with open(path, encoding="utf-8") as file:
        return TransformerConfig.from_dict(json.load(file))
