"""A training run's folder and the models in it: what training writes and translation,
evaluation, export and averaging read. Below both `training` and `translation`.

    layout.py       OutputDir: the files of a run folder, and their names
    decoding.py     decoding_defaults: the search settings of a run's decoding.json
    models.py       atomic_save_model, find_model_files, load_model: a run's model in and out
    checkpoints.py  Checkpointer: the tf.train.Checkpoint files of a run (TensorFlow only)
    averaging.py    average_checkpoints: the mean of the last N checkpoints (paper 6.1)

Names are imported on first use: `layout` and `models` need no TensorFlow.

Example:
    >>> from keras_transformer.runs import OutputDir
    >>> OutputDir("runs/ende").translation_model
    'runs/ende/model.keras'
"""

from keras_transformer._lazy import lazy_exports

_EXPORTS = {
    "OutputDir": "layout",
    "atomic_save_model": "models",
    "find_model_files": "models",
    "load_model": "models",
    "decoding_defaults": "decoding",
    "Checkpointer": "checkpoints",
    "list_checkpoints": "checkpoints",
    "model_variables": "checkpoints",
    "average_checkpoints": "averaging",
    "in_last_fraction": "averaging",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
