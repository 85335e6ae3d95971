"""Saving, finding and loading the model of a run: what translation, evaluation and export
start from.

A path that designates a model is a run folder (its `translation_model`, else its newest
checkpoint), a `.keras` file, or a checkpoint prefix `RUN/checkpoints/ckpt-STEP`. A `.keras`
file saved into a run folder (`atomic_save_model`) carries the run's `vocab.model` inside it
(`Transformer.tokenizer`), so it translates on its own when copied elsewhere. `.keras` files
load on any Keras backend; only checkpoints need TensorFlow, which is imported when one is read.

Example:
    >>> model, files = load_model("runs/ende")  # doctest: +SKIP
    >>> files["model"]  # doctest: +SKIP
    'runs/ende/averaged.keras'
"""

import os

import keras

from keras_transformer.config import TransformerConfig
from keras_transformer.data.marian_vocabulary import is_marian_folder
from keras_transformer.data.vocabulary import SubwordVocabulary
from keras_transformer.errors import UserInputError
from keras_transformer.files import temporary_beside
from keras_transformer.model import build_model
from keras_transformer.runs.layout import VOCAB_FILE, OutputDir


def atomic_save_model(model, path, vocabulary=None):
    """Saves a Keras model to `path` (`.keras`) through a temporary file and a rename.

    A `Transformer` that carries no vocabulary yet is given `vocabulary` first
    (`Transformer.tokenizer`), when that file exists: the saved file then holds the
    SentencePiece model and `Translator.load(path)` needs nothing beside it.

    Args:
        model: the Keras model.
        path: the `.keras` file.
        vocabulary: the `vocab.model` to give a `Transformer` without one (default: the one
            beside `path`, as in a run folder).

    Example:
        >>> atomic_save_model(model, "runs/ende/model.keras")  # doctest: +SKIP
    """
    if vocabulary is None:
        vocabulary = os.path.join(os.path.dirname(os.path.abspath(path)), VOCAB_FILE)
    if getattr(model, "tokenizer", False) is None and os.path.isfile(vocabulary):
        model.tokenizer = SubwordVocabulary.from_file(vocabulary).to_tokenizer()
    with temporary_beside(path, suffix=".keras") as temporary:
        model.save(temporary, overwrite=True)


def _vocabulary_in(folder):
    candidate = os.path.join(folder, VOCAB_FILE)
    if os.path.isfile(candidate):
        return candidate
    # An imported model's vocabulary is several files: the folder designates them.
    return folder if is_marian_folder(folder) else None


def find_model_files(path):
    """The model and vocabulary files that `path` designates.

    Args:
        path: a training run folder (its `translation_model`, else its newest checkpoint), a
            `.keras` file, or a checkpoint prefix `RUN/checkpoints/ckpt-STEP`.

    Returns:
        A dict with `kind` ("keras" or "checkpoint"), `model` (the file or prefix), `config`
        (the `config.json` a checkpoint needs, else None) and `vocabulary` (the `vocab.model`
        path, the run folder of an imported model's `source.spm`, `target.spm` and
        `vocab.json`, or None when there is none where the convention puts it).

    Raises:
        UserInputError: when `path` is none of these.

    Example:
        >>> find_model_files("runs/ende")["model"]  # doctest: +SKIP
        'runs/ende/averaged.keras'
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        return _find_in_run(path)
    if path.endswith(".keras") and os.path.isfile(path):
        folder = os.path.dirname(os.path.abspath(path))
        return {
            "kind": "keras",
            "model": path,
            "config": None,
            "vocabulary": _vocabulary_in(folder),
        }
    if os.path.isfile(path + ".index"):
        run_dir = os.path.dirname(os.path.dirname(os.path.abspath(path)))
        return {
            "kind": "checkpoint",
            "model": path,
            "config": OutputDir(run_dir).model_config,
            "vocabulary": _vocabulary_in(run_dir),
        }
    raise UserInputError(
        f"cannot load a model from {path!r}: it is not a training output_dir, an existing "
        ".keras file nor a checkpoint prefix (RUN/checkpoints/ckpt-STEP with a .index file)"
    )


def _find_in_run(path):
    run = OutputDir(path)
    if os.path.isfile(run.translation_model):
        return {
            "kind": "keras",
            "model": run.translation_model,
            "config": None,
            "vocabulary": _vocabulary_in(path),
        }
    checkpoints = _list_checkpoints(run.checkpoint_dir)
    if checkpoints:
        return {
            "kind": "checkpoint",
            "model": checkpoints[-1],
            "config": run.model_config,
            "vocabulary": _vocabulary_in(path),
        }
    raise UserInputError(
        f"{path!r} holds no averaged.keras, model.keras nor checkpoints/: give a training "
        "output_dir, a .keras file or a checkpoint prefix such as RUN/checkpoints/ckpt-1000"
    )


def _list_checkpoints(directory):
    if not os.path.isfile(os.path.join(directory, "checkpoint")):
        return []
    # TensorFlow only where there are checkpoints: `.keras` models load on any backend.
    from keras_transformer.runs.checkpoints import list_checkpoints

    return list_checkpoints(directory)


def load_model(path, average_last=None):
    """A `Transformer` from a run folder, a `.keras` file or a checkpoint prefix.

    `.keras` files load on any Keras backend; checkpoints need TensorFlow.

    Args:
        path: see `find_model_files`.
        average_last: with a run folder, average its last N checkpoints instead (paper 6.1).

    Returns:
        `(model, files)`: the `Transformer` and the dict of `find_model_files`, whose
        `vocabulary` is the `SubwordVocabulary` the model carries when it carries one (a
        `.keras` file saved with it), else the `vocab.model` path or None.

    Example:
        >>> model, files = load_model("runs/ende")  # doctest: +SKIP
    """
    if average_last:
        return _load_average(path, average_last)
    files = find_model_files(path)
    if files["kind"] == "keras":
        model = keras.saving.load_model(files["model"], compile=False)
        if getattr(model, "tokenizer", None) is not None:
            files["vocabulary"] = SubwordVocabulary.from_tokenizer(model.tokenizer)
        return model, files
    return _load_checkpoint(files), files


def _load_average(path, last):
    # TensorFlow only here: averaging reads checkpoints.
    from keras_transformer.runs.averaging import average_checkpoints

    model = average_checkpoints(path, last=last)
    return model, {
        "kind": "average",
        "model": path,
        "config": None,
        "vocabulary": _vocabulary_in(path),
    }


def _load_checkpoint(files):
    if keras.backend.backend() != "tensorflow":
        raise UserInputError(
            f"{files['model']} is a TensorFlow checkpoint: load it with KERAS_BACKEND="
            "tensorflow, or save the model as .keras (keras-transformer average writes one)"
        )
    # TensorFlow only here: the checkpoint format is tf.train.Checkpoint's.
    import tensorflow as tf

    from keras_transformer.runs.checkpoints import model_variables

    if not os.path.isfile(files["config"]):
        raise UserInputError(
            f"cannot find {files['config']!r}, the model config of checkpoint {files['model']}"
        )
    with open(files["config"], encoding="utf-8") as file:
        model = build_model(TransformerConfig.from_json(file.read()))
    # Training's checkpoints key the weights by variable path (see model_variables).
    status = tf.train.Checkpoint(model=model_variables(model)).read(files["model"])
    status.expect_partial()  # the optimizer state is not needed to translate
    status.assert_existing_objects_matched()
    return model
