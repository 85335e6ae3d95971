"""Noise a user sees that says nothing: TensorFlow's retracing warning about the compiled
search (by design, one trace per Translator and shape bucket), a checkpoint's variables listed
over and over while it is restored, and the CLI's training notes printed twice."""

import io
import logging

import tensorflow as tf

from keras_transformer import TransformerConfig, build_model, build_optimizer
from keras_transformer.runs.checkpoints import Checkpointer, has_data_iterator
from keras_transformer.translation import Translator
from tests._decoding_fixtures import SENTENCES, tiny_model, train_char_vocabulary


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_no_retracing_warning_from_many_translators(tmp_path):
    vocabulary = train_char_vocabulary(tmp_path)
    model = tiny_model(vocab_size=25, max_length=48, seed=21, sharpen=2.0)
    records = _Records()
    tensorflow_logger = logging.getLogger("tensorflow")
    tensorflow_logger.addHandler(records)
    try:
        # A new Translator (as a dev evaluation makes) for batches of new shapes each time:
        # TensorFlow warns from the fifth trace on.
        for count in range(1, 7):
            Translator(model, vocabulary, beam_size=2, max_extra_length=2).translate(
                SENTENCES[:count]
            )
    finally:
        tensorflow_logger.removeHandler(records)
    assert not [m for m in records.messages if "retracing" in m], records.messages
    # Another function's retracing warning still shows.
    tensorflow_logger.addHandler(records)
    try:
        tensorflow_logger.warning(
            "5 out of the last 5 calls to <function f> triggered tf.function retracing."
        )
    finally:
        tensorflow_logger.removeHandler(records)
    assert len(records.messages) == 1


def test_a_restore_lists_the_checkpoint_once(tmp_path, monkeypatch):
    config = TransformerConfig(
        vocab_size=40, num_layers=1, d_model=16, d_ff=32, num_heads=2, dropout=0.1
    )

    def checkpointer():
        model = build_model(config)
        optimizer = build_optimizer(config.d_model)
        optimizer.build(model.trainable_variables)
        return Checkpointer(str(tmp_path / "checkpoints"), model, optimizer)

    checkpointer().save(7)
    listed = []
    list_variables = tf.train.list_variables
    monkeypatch.setattr(
        tf.train, "list_variables", lambda path: listed.append(path) or list_variables(path)
    )
    restoring = checkpointer()
    assert restoring.restore_latest() == 0  # the optimizer had not stepped
    assert not has_data_iterator(restoring.restored_path)
    assert len(listed) == 1, listed


def test_the_training_notes_print_once(monkeypatch):
    from keras_transformer.cli.train import _log_to_stderr

    package = logging.getLogger("keras_transformer")
    root = logging.getLogger()
    saved = package.handlers[:], package.level, package.propagate, root.handlers[:]
    stderr = io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    package.handlers.clear()
    root.handlers.clear()
    try:
        _log_to_stderr()
        # A library logging through the root logger during training installs a root handler.
        logging.basicConfig(stream=stderr, level=logging.INFO)
        logging.getLogger("keras_transformer.training.trainer").info("trained 2 steps")
    finally:
        package.handlers[:], root.handlers[:] = saved[0], saved[3]
        package.setLevel(saved[1])
        package.propagate = saved[2]
    assert stderr.getvalue().count("trained 2 steps") == 1, stderr.getvalue()


# TensorFlow's start-up lines: a CUDA probe that reads as an error on a machine without a GPU.
STARTUP_PROGRAM = """
import sys
from keras_transformer.cli.startup import import_tensorflow_quietly, quiet_tensorflow
import_tensorflow_quietly(quiet_tensorflow(sys.argv))
import tensorflow as tf
print(int(tf.reduce_sum(tf.constant([1, 2]))))  # initializes the devices: the CUDA probe
"""


def _run_python(arguments, environ_changes):
    import os
    import subprocess
    import sys

    from keras_transformer.cli.startup import STARTUP_NOISE

    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env.update(environ_changes)
    result = subprocess.run(
        [sys.executable, *arguments], capture_output=True, text=True, env=env, check=True
    )
    noise = [line for line in result.stderr.splitlines() if STARTUP_NOISE.match(line)]
    return result.stdout, noise


def test_tensorflows_startup_lines_are_quiet_by_default_and_shown_with_verbose():
    stdout, noise = _run_python(["-c", STARTUP_PROGRAM], {})
    assert stdout == "3\n" and noise == []
    stdout, noise = _run_python(["-c", STARTUP_PROGRAM, "--verbose"], {})
    assert stdout == "3\n" and noise  # TensorFlow's own lines, the CUDA probe among them here


def test_the_users_log_level_stands(monkeypatch):
    from keras_transformer.cli.startup import quiet_tensorflow

    environ = {"TF_CPP_MIN_LOG_LEVEL": "0"}
    assert quiet_tensorflow(["translate"], environ) is False
    assert environ == {"TF_CPP_MIN_LOG_LEVEL": "0"}
    environ = {}
    assert quiet_tensorflow(["translate", "--verbose"], environ) is True and environ == {}


def test_the_cli_takes_verbose_anywhere_and_leaves_the_level_to_tensorflow():
    program = (
        "import os, sys; from keras_transformer.cli import main; status = main(sys.argv[1:]); "
        "print(status, os.environ.get('TF_CPP_MIN_LOG_LEVEL'))"
    )
    info = ["info", "--preset", "base", "--vocab-size", "100"]
    stdout, _ = _run_python(["-c", program, *info], {})
    assert stdout.splitlines()[-1] == "0 3"
    stdout, _ = _run_python(["-c", program, *info, "--verbose"], {})
    assert stdout.splitlines()[-1] == "0 None"
    stdout, _ = _run_python(["-c", program, "--verbose", *info], {"TF_CPP_MIN_LOG_LEVEL": "1"})
    assert stdout.splitlines()[-1] == "0 1"


# Loads every subcommand's module as `keras-transformer COMMAND --help` does: none may import
# TensorFlow (its start-up lines would stand above the help, and seconds of start-up with them).
COMMAND_MODULES_PROGRAM = """
import sys
from keras_transformer.cli import COMMANDS, _load
for name in COMMANDS:
    _load(name)
print(sorted(m for m in ("tensorflow", "keras", "jax", "torch") if m in sys.modules))
"""

# A command module that imports TensorFlow as it loads, under main's guard: the help stays clean.
NOISY_MODULE_PROGRAM = """
import sys
from keras_transformer import cli
from keras_transformer.cli.startup import dropping_startup_noise, quiet_tensorflow
with dropping_startup_noise(quiet_tensorflow(sys.argv)):
    import tensorflow as tf
print(int(tf.reduce_sum(tf.constant([1, 2]))))
"""


def test_no_command_module_imports_a_framework_as_it_loads():
    stdout, noise = _run_python(["-c", COMMAND_MODULES_PROGRAM], {})
    assert stdout == "[]\n" and noise == []


def test_the_guard_around_loading_a_command_drops_tensorflows_lines():
    stdout, noise = _run_python(["-c", NOISY_MODULE_PROGRAM], {})
    assert stdout == "3\n" and noise == []
    stdout, noise = _run_python(["-c", NOISY_MODULE_PROGRAM, "--verbose"], {})
    assert stdout == "3\n" and noise
