"""The files that describe a run in its folder, beside the weights: the model's `config.json`,
the `training_config.json` it was started with, and `init.json` for a fine-tuned run.

A start never overwrites a different model's files: a run goes on only under the same model,
with new values allowed for the fields that change how it trains, not what its weights are
(`TRAINING_ONLY_FIELDS`); the earlier file is kept aside under a time-stamped name.

Example:
    >>> check_run_model(model_config, OutputDir("runs/ende"))  # doctest: +SKIP
"""

import json
import logging
import os
import time

from keras_transformer.config import TransformerConfig
from keras_transformer.errors import UserInputError
from keras_transformer.files import atomic_copy, atomic_write

logger = logging.getLogger(__name__)

# Fields that change how the model trains, not what its weights are: a run goes on under new
# values (as OpenNMT-tf and fairseq let dropout change on a resume), e.g. when a recipe's
# default changes between two starts of the same command.
TRAINING_ONLY_FIELDS = ("dropout", "attention_dropout", "relu_dropout", "label_smoothing")


def changed_model_fields(model_config, run):
    """The fields of `model_config` that differ from the run's config.json (with the existing
    values), or None when there is no config.json yet.

    Raises:
        UserInputError: when the run holds another model (fields beyond
            `TRAINING_ONLY_FIELDS` differ).
    """
    if not os.path.exists(run.model_config):
        return None
    with open(run.model_config, encoding="utf-8") as file:
        existing = TransformerConfig.from_dict(json.load(file)).to_dict()
    changed = sorted(k for k, v in model_config.to_dict().items() if existing.get(k) != v)
    if set(changed) - set(TRAINING_ONLY_FIELDS):
        raise UserInputError(
            f"output_dir {run.path!r} holds a run of another model (fields {changed} "
            "differ from its config.json); use a new output_dir to train this model"
        )
    return changed, existing


def check_run_model(model_config, run):
    """Raises `UserInputError` when the run folder holds another model, before anything is
    built or restored."""
    changed_model_fields(model_config, run)


def write_run_files(config, model_config, run):
    """Writes config.json and training_config.json; never overwrites a different model's
    (one that differs in more than `TRAINING_ONLY_FIELDS`), and keeps earlier versions."""
    found = changed_model_fields(model_config, run)
    if found is not None:
        changed, existing = found
        if changed:
            kept = keep_previous(run.model_config)
            logger.warning(
                "%s goes on with %s (before: %s; kept in %s)",
                run.path,
                {k: getattr(model_config, k) for k in changed},
                {k: existing.get(k) for k in changed},
                kept,
            )
            with atomic_write(run.model_config) as file:
                file.write(model_config.to_json())
    else:
        with atomic_write(run.model_config) as file:
            file.write(model_config.to_json())
    text = config.to_json()
    if os.path.exists(run.training_config):
        with open(run.training_config, encoding="utf-8") as file:
            previous = file.read()
        if previous == text:
            return
        # Keep the settings of earlier starts (e.g. before train_steps was raised).
        keep_previous(run.training_config)
    with atomic_write(run.training_config) as file:
        file.write(text)


def write_init_record(run, init):
    """`init.json`: the run, file, kind and step a fine-tuned run took its first weights from."""
    with atomic_write(run.init_record) as file:
        json.dump({k: init[k] for k in ("run", "file", "kind", "step")}, file)


def keep_previous(path):
    """Copies a run file aside as NAME.<time stamp>.json; returns the copy's path.

    A copy, not a move: `path` stays in place until its successor is renamed onto it, so a
    start killed in between leaves the run with its old file, not without one.
    """
    stem = f"{path[:-5]}.{time.strftime('%Y%m%d-%H%M%S')}"
    kept, number = f"{stem}.json", 1
    while os.path.exists(kept):  # two starts in one second: the copy would overwrite
        number += 1
        kept = f"{stem}-{number}.json"
    atomic_copy(path, kept)
    return kept
