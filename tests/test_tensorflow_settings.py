"""tests/_tensorflow_settings.py: Grappler and oneDNN's kernels are off in the test processes
unless KT_TEST_TF_DEFAULTS=1, the training scripts that tests start begin with the line that
turns Grappler off there too, and what users run gets TensorFlow's defaults back."""

import os
import subprocess

import keras
import pytest

from tests import _kill_fixtures, _quickstart_fixtures, _strategy_fixtures, _tensorflow_settings
from tests.test_docs_examples import page_environment

DEFAULTS = _tensorflow_settings.keeps_defaults()


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="Grappler is TensorFlow's")
def test_grappler_and_onednn_are_off_in_this_process_unless_asked():
    import tensorflow as tf

    off = tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer", False)
    assert off == (not DEFAULTS)
    if not DEFAULTS and _tensorflow_settings._USER_ONEDNN is None:
        assert os.environ[_tensorflow_settings.ONEDNN] == "0"


def test_the_child_scripts_begin_with_the_prelude():
    # The SavedModel loaders too: their outputs are compared with this process's Translator.
    from tests import test_export, test_pretrained

    scripts = (_kill_fixtures.RUNNER, _strategy_fixtures.STEP_LOSSES)
    for script in (*scripts, test_export.LOADER, test_pretrained.LOADER):
        assert script.startswith(_tensorflow_settings.CHILD_PRELUDE)
    namespace = {}
    exec(compile(_tensorflow_settings.CHILD_PRELUDE, "<prelude>", "exec"), namespace)
    assert namespace["turn_off_grappler"] is _tensorflow_settings.turn_off_grappler


def test_the_quickstart_and_the_pages_run_with_the_users_kernels(tmp_path, monkeypatch):
    user = _tensorflow_settings._USER_ONEDNN
    assert page_environment(tmp_path / "bin").get(_tensorflow_settings.ONEDNN) == user
    # The quickstart's process, as the shared build starts it.
    started = []

    def run(command, **kwargs):
        started.append(kwargs["env"])
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(subprocess, "run", run)
    _quickstart_fixtures._write(tmp_path)
    assert [env.get(_tensorflow_settings.ONEDNN) for env in started] == [user]
