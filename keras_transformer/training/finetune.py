"""Fine-tuning (`init_from`): a new run that starts from the weights and vocabulary of a trained
run, with a fresh optimizer at step 0 and its own schedule and data.

The weights come from the trained run's averaged model, else its final model, else its newest
checkpoint; only weights are read, matched by Keras path. The model settings must give the
same weight shapes (dropout and label smoothing may change). A fine-tuned run that has
checkpoints of its own resumes from them instead.

Example:
    >>> config, init = resolve_init(config)  # doctest: +SKIP
    >>> initialize_from(transformer, init)  # doctest: +SKIP
"""

import dataclasses
import filecmp
import json
import logging
import os

import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.data.marian_vocabulary import is_marian_folder
from keras_transformer.data.vocabulary import SubwordVocabulary
from keras_transformer.errors import UserInputError
from keras_transformer.runs.checkpoints import list_checkpoints, model_variables
from keras_transformer.runs.layout import OutputDir
from keras_transformer.runs.models import load_model
from keras_transformer.training.run_files import TRAINING_ONLY_FIELDS

logger = logging.getLogger(__name__)


def resolve_init(config):
    """`config` ready to fine-tune from `config.init_from` (its `data.vocab` set to that run's
    vocabulary), and what to start from: `{run, file, kind, step}` (None: no `init_from`, or
    the run resumes from checkpoints of its own).

    Raises:
        UserInputError: when `init_from` is not a trained run folder, has no weights, or the
            config names a vocabulary of other pieces.
    """
    if config.init_from is None:
        return config, None
    source, key = OutputDir(config.init_from), "init_from"
    if list_checkpoints(OutputDir(config.output_dir).checkpoint_dir):
        logger.info(
            "%s has checkpoints of its own: resuming from them, not from %s",
            config.output_dir,
            source.path,
        )
        # The same data.vocab as the first start, so that training_config.json stays the same.
        if config.data.vocab is None and os.path.isfile(source.vocabulary):
            config = config.replace(data=dataclasses.replace(config.data, vocab=source.vocabulary))
        return config, None
    if not os.path.isdir(source.path):
        raise UserInputError(
            f"{key} {source.path!r} is not a folder; give the output_dir of a trained run"
        )
    imported = not os.path.isfile(source.vocabulary) and is_marian_folder(source.path)
    if imported:
        if config.data.vocab is not None:
            raise UserInputError(
                f"data.vocab {config.data.vocab!r}: {key} {source.path!r} is an imported model, "
                "whose vocabulary (source.spm, target.spm, vocab.json) the fine-tuned run "
                "keeps; remove data.vocab"
            )
        if not os.path.isfile(source.model_config):
            raise UserInputError(
                f"{key} {source.path!r} has no config.json; import the model again"
            )
        return config, dict(_init_weights(source), imported=True)
    for path in (source.model_config, source.vocabulary):
        if not os.path.isfile(path):
            raise UserInputError(
                f"{key} {source.path!r} is not a training run folder: it has no "
                f"{os.path.basename(path)}; give the output_dir of a trained run"
            )
    init = _init_weights(source)
    if config.data.vocab is not None and not filecmp.cmp(
        config.data.vocab, source.vocabulary, shallow=False
    ):
        _check_same_pieces(config.data.vocab, source.vocabulary)
    return config.replace(data=dataclasses.replace(config.data, vocab=source.vocabulary)), init


def _init_weights(source):
    """The weights a fine-tuned run starts from: the run's averaged model, else its final
    model, else its newest checkpoint."""
    checkpoints = (
        list_checkpoints(source.checkpoint_dir) if os.path.isdir(source.checkpoint_dir) else []
    )
    newest_step = int(checkpoints[-1].rsplit("-", 1)[1]) if checkpoints else None
    models = [("averaged", source.averaged_model), ("final", source.final_model)]
    found = [(kind, path) for kind, path in models if os.path.isfile(path)]
    if not found and not checkpoints:
        raise UserInputError(
            f"init_from {source.path!r} holds no weights (no averaged.keras, model.keras or "
            "checkpoint); train it first, or give another run"
        )
    kind, path = found[0] if found else ("checkpoint", checkpoints[-1])
    # The step of the newest checkpoint: the one the run's final (or averaged) model ends at.
    return {
        "run": os.path.abspath(source.path),
        "file": os.path.abspath(path),
        "kind": kind,
        "step": newest_step,
        "model_config": source.model_config,
    }


def _check_same_pieces(vocab, source_vocab):
    def pieces(path):
        processor = SubwordVocabulary.from_file(path).processor
        return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]

    if pieces(vocab) != pieces(source_vocab):
        raise UserInputError(
            f"data.vocab {vocab!r} has other pieces than {source_vocab!r}, the vocabulary "
            "of init_from: a fine-tuned model keeps the ids it was trained with; remove "
            "data.vocab (the run's own vocabulary is used) or start from another run"
        )


def imported_model_config(config, source):
    """The model of a run tuning an imported model: `source`'s config.json (`init_from`'s, or
    the run's own on a resume), with the config's dropout and label smoothing.

    Raises:
        UserInputError: when the config's model section sets any other field: the
            architecture is the imported model's.
    """
    path = source.model_config if isinstance(source, OutputDir) else source
    with open(path, encoding="utf-8") as file:
        existing = TransformerConfig.from_dict(json.load(file))
    overrides = {k: v for k, v in config.model.items() if k != "preset"}
    fixed = sorted(k for k in overrides if k not in TRAINING_ONLY_FIELDS)
    if fixed or config.model.get("preset", "base") != "base":
        named = ", ".join(f"model.{k}" for k in fixed or ["preset"])
        raise UserInputError(
            f"{named}: the model of a run tuning an imported model is that model's "
            f"({path}); leave the model section out, or set only "
            f"{', '.join(TRAINING_ONLY_FIELDS)}"
        )
    return dataclasses.replace(existing, **overrides)


def check_init_model(model_config, init):
    """Raises `UserInputError` naming every model field that gives weights other than those
    of `init_from` (dropout and label smoothing may change)."""
    with open(init["model_config"], encoding="utf-8") as file:
        existing = TransformerConfig.from_dict(json.load(file)).to_dict()
    free = set(TRAINING_ONLY_FIELDS)
    if existing.get("positional") == model_config.positional == "sinusoidal":
        free.add("max_length")  # a sinusoidal table is computed, not a weight
    new = model_config.to_dict()
    changed = [
        f"{k}: {existing.get(k)!r} in init_from, {v!r} in this config"
        for k, v in new.items()
        if k not in free and existing.get(k) != v
    ]
    if changed:
        raise UserInputError(
            f"init_from {init['run']!r} is another model than this config's: "
            + "; ".join(changed)
            + ". Set the model section as in that run's config.json to fine-tune it"
        )


def initialize_from(transformer, init):
    """Gives `transformer` the weights of `init["file"]`: weights only, by Keras path."""
    logger.info(
        "starting from the weights of %s (%s model of %s, step %s): a fresh optimizer, "
        "step 0, this config's schedule and data",
        init["file"],
        init["kind"],
        init["run"],
        init["step"],
    )
    if init["kind"] == "checkpoint":
        tf.train.Checkpoint(model=model_variables(transformer)).read(
            init["file"]
        ).assert_existing_objects_matched().expect_partial()
        return
    loaded, _ = load_model(init["file"])
    weights = {variable.path: variable for variable in loaded.weights}
    missing = [v.path for v in transformer.weights if v.path not in weights]
    if missing:
        raise UserInputError(
            f"{init['file']} does not hold the weights of this model (missing {missing[:3]}); "
            "fine-tune from a run of the same model config"
        )
    for variable in transformer.weights:
        variable.assign(weights[variable.path])
