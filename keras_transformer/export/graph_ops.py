"""Which ops an exported graph uses, and whether stock TensorFlow Serving can run them.

TF Serving's binary has TensorFlow's core ops and, since 2.2, the SentencePiece ops of
tensorflow-text. A SavedModel that holds any other op (a Python function, an op of another
library) loads in Python but fails in the server: `check_serving_ops` finds them before a
user's deployment does.
"""

import pathlib
import subprocess
import sys

from keras_transformer.errors import UserInputError

# The tensorflow-text ops that stock TF Serving links (SentencePiece, since TF Serving 2.2).
TF_TEXT_SERVING_OPS = frozenset(
    {
        "SentencepieceOp",
        "SentencepieceTokenizeOp",
        "SentencepieceTokenizeWithOffsetsOp",
        "SentencepieceDetokenizeOp",
        "SentencepieceIdToStringOp",
        "SentencepieceStringToIdOp",
        "SentencepieceVocabSizeOp",
    }
)

# Core ops that call back into Python: they exist in the core registry, but the server has no
# Python to run them.
PYTHON_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})


def saved_model_ops(export_dir):
    """The set of op types in a SavedModel's graphs, functions included."""
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((pathlib.Path(export_dir) / "saved_model.pb").read_bytes())
    ops = set()
    for meta_graph in proto.meta_graphs:
        ops.update(node.op for node in meta_graph.graph_def.node)
        for function in meta_graph.graph_def.library.function:
            ops.update(node.op for node in function.node_def)
    return ops


def core_tensorflow_ops():
    """Op names registered by TensorFlow alone, read in a fresh interpreter that imports
    nothing but tensorflow (this process may have loaded tensorflow-text's ops)."""
    code = "import tensorflow as tf; print('\\n'.join(dir(tf.raw_ops)))"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"TF_CPP_MIN_LOG_LEVEL": "3", **_inherited_environment()},
    )
    return frozenset(line for line in result.stdout.split() if line[:1].isupper())


def _inherited_environment():
    import os

    return {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}


def check_serving_ops(export_dir, core_ops=None):
    """Raises `UserInputError` naming every op that stock TF Serving cannot run.

    Args:
        export_dir: a SavedModel directory.
        core_ops: the core op names (default: `core_tensorflow_ops()`).

    Returns:
        The sorted list of the graph's op types.
    """
    ops = saved_model_ops(export_dir)
    core_ops = core_tensorflow_ops() if core_ops is None else core_ops
    foreign = sorted((ops - core_ops - TF_TEXT_SERVING_OPS) | (ops & PYTHON_OPS))
    if foreign:
        raise UserInputError(
            f"the SavedModel at {export_dir} uses ops that stock TensorFlow Serving cannot run: "
            f"{', '.join(foreign)}; only TensorFlow core ops and tensorflow-text's "
            "SentencePiece ops are allowed in an export"
        )
    return sorted(ops)
