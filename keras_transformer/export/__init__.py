"""Exports: a SavedModel for TensorFlow Serving (TensorFlow-only), a CTranslate2 model.

saved_model.py  export_saved_model: BASE/NAME/VERSION/, atomic, never overwrites
ctranslate2.py  export_ctranslate2: a CTranslate2 model directory (the ctranslate2 extra)
signatures.py   the graph functions: tokenize, beam search, detokenize; the settings'
                range asserts (decoding/settings.py's rule) and the text-only `translate`
graph_ops.py    which ops an export uses; fail on any stock TF Serving lacks
"""

from keras_transformer.export.ctranslate2 import export_ctranslate2
from keras_transformer.export.graph_ops import check_serving_ops, saved_model_ops
from keras_transformer.export.saved_model import existing_versions, export_saved_model, next_version

__all__ = [
    "check_serving_ops",
    "existing_versions",
    "export_ctranslate2",
    "export_saved_model",
    "next_version",
    "saved_model_ops",
]
