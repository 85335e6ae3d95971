"""keras-transformer: the Transformer of "Attention Is All You Need" in Keras 3.

The model, its layers, losses and schedule use `keras.ops` only: importing this package needs
no TensorFlow, and the model runs on the TensorFlow, JAX and PyTorch backends. The
TensorFlow-only parts (`keras_transformer.data`, `.training`, `.export`) are imported on demand.

Public names are resolved lazily (PEP 562), so that `import keras_transformer` and the CLI's
light commands do not pay for importing Keras and its backend.
"""

import importlib

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "TransformerConfig": "keras_transformer.config",
    "UserInputError": "keras_transformer.errors",
    "LabelSmoothedCrossEntropy": "keras_transformer.losses",
    "MaskedTokenAccuracy": "keras_transformer.losses",
    "Perplexity": "keras_transformer.losses",
    "Transformer": "keras_transformer.model",
    "build_model": "keras_transformer.model",
    "NoamSchedule": "keras_transformer.schedules",
    "LinearDecaySchedule": "keras_transformer.schedules",
    "build_optimizer": "keras_transformer.schedules",
    "FusedAdam": "keras_transformer.optimizers",
    "BeamSearch": "keras_transformer.decoding",
    "greedy_search": "keras_transformer.decoding",
    "Translator": "keras_transformer.translation",
    "translate": "keras_transformer.translation",
    "Parser": "keras_transformer.parsing.parser",
    "parse": "keras_transformer.parsing.parser",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'keras_transformer' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
