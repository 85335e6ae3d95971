"""keras-transformer: the Transformer of "Attention Is All You Need" in Keras 3.

The model, its layers, losses and schedule use `keras.ops` only: importing this package needs
no TensorFlow, and the model runs on the TensorFlow, JAX and PyTorch backends. The
TensorFlow-only parts (`keras_transformer.data`, training, export) are imported on demand.
"""

from keras_transformer.config import TransformerConfig
from keras_transformer.losses import LabelSmoothedCrossEntropy, MaskedTokenAccuracy, Perplexity
from keras_transformer.model import Transformer, build_model
from keras_transformer.schedules import NoamSchedule, build_optimizer

__version__ = "0.1.0"

__all__ = [
    "LabelSmoothedCrossEntropy",
    "MaskedTokenAccuracy",
    "NoamSchedule",
    "Perplexity",
    "Transformer",
    "TransformerConfig",
    "build_model",
    "build_optimizer",
]
