"""TensorFlow's start-up messages, quiet unless asked for.

On a machine without a GPU, TensorFlow logs its CUDA probe at start-up ("E0000 ... failed call
to cuInit: INTERNAL: CUDA error"), an ERROR line that reads as a failure to a new user though
nothing failed; with its INFO and WARNING lines it stands before the output people came for.
`quiet_tensorflow` sets `TF_CPP_MIN_LOG_LEVEL=3` before TensorFlow is imported, unless the user
set the variable (their value stands) or asked for `--verbose` (TensorFlow's default: every
line). `import_tensorflow_quietly` also drops the lines TensorFlow writes while it is imported,
which ignore the variable. The CLI and the pipelines in `pipelines/` call both before anything
imports TensorFlow; nothing here imports it at module level.

Example:
    >>> environ = {}
    >>> quiet_tensorflow(["train", "--verbose"], environ), environ
    (True, {})
    >>> quiet_tensorflow(["train"], environ), environ
    (False, {'TF_CPP_MIN_LOG_LEVEL': '3'})
    >>> quiet_tensorflow(["train"], {"TF_CPP_MIN_LOG_LEVEL": "0"})  # the user's value stands
    False
"""

import contextlib
import os
import re
import sys

VERBOSE_FLAG = "--verbose"
VERBOSE_HELP = "show TensorFlow's start-up and C++ log lines (quiet by default)"
# TensorFlow's C++ start-up lines: absl logs written before `absl::InitializeLog()` ignore
# TF_CPP_MIN_LOG_LEVEL (TensorFlow 2.21), so they would stand before every one-line error.
STARTUP_NOISE = re.compile(r"WARNING: All log messages before absl::InitializeLog|[IWE]\d{4} ")


def quiet_tensorflow(argv, environ=None):
    """Quiets TensorFlow's C++ logs unless `--verbose` is in `argv` or the user set
    `TF_CPP_MIN_LOG_LEVEL` in `environ` (default: `os.environ`); returns whether `--verbose`
    was given."""
    verbose = VERBOSE_FLAG in argv
    if not verbose:
        (os.environ if environ is None else environ).setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return verbose


@contextlib.contextmanager
def dropping_startup_noise(verbose=False):
    """Within the block, stderr loses TensorFlow's start-up chatter (`STARTUP_NOISE`: the absl
    banner and C++ log lines, written by an import of TensorFlow that ignores
    TF_CPP_MIN_LOG_LEVEL); anything else written (a Python warning, an error) is written after
    the block. Nothing is dropped with `verbose`."""
    if verbose:
        yield
        return
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text = captured.read().decode("utf-8", errors="replace")
            sys.stderr.writelines(
                line for line in text.splitlines(keepends=True) if not STARTUP_NOISE.match(line)
            )


def import_tensorflow_quietly(verbose=False):
    """Imports TensorFlow within `dropping_startup_noise`. Nothing to do with `verbose`, on
    another Keras backend, or when TensorFlow is imported already or absent."""
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    if verbose or backend != "tensorflow" or "tensorflow" in sys.modules:
        return
    with dropping_startup_noise():
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            pass  # the command that needs it reports it
