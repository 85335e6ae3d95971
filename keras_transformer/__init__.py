"""keras-transformer: the Transformer of "Attention Is All You Need" in Keras 3.

The model, its layers, losses and schedule use `keras.ops` only: importing this package needs
no TensorFlow, and the model runs on the TensorFlow, JAX and PyTorch backends. The
TensorFlow-only parts (`keras_transformer.data`, `.training`, `.export`) are imported on demand.

Public names are resolved lazily (PEP 562), so that `import keras_transformer` and the CLI's
light commands do not pay for importing Keras and its backend.
"""

from keras_transformer._lazy import lazy_exports

__version__ = "0.1.0"

# public name -> the module that defines it (relative to this package)
_EXPORTS = {
    "TransformerConfig": "config",
    "UserInputError": "errors",
    "LabelSmoothedCrossEntropy": "losses",
    "MaskedTokenAccuracy": "losses",
    "Perplexity": "losses",
    "Transformer": "model",
    "build_model": "model",
    "NoamSchedule": "schedules",
    "LinearDecaySchedule": "schedules",
    "build_optimizer": "schedules",
    "FusedAdam": "optimizers",
    "BeamSearch": "decoding",
    "greedy_search": "decoding",
    "Translator": "translation",
    "translate": "translation",
    "Parser": "parsing.parser",
    "parse": "parsing.parser",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
