"""tests/_graph_rewrites.py: Grappler is off in the test processes unless KT_TEST_GRAPPLER=1,
and the training scripts that tests start begin with the line that turns it off there too."""

import os

import keras
import pytest

from tests import _graph_rewrites, _kill_fixtures, _strategy_fixtures


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="Grappler is TensorFlow's")
def test_grappler_is_off_in_this_process_unless_asked():
    import tensorflow as tf

    off = tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer", False)
    assert off == (os.environ.get("KT_TEST_GRAPPLER") != "1")


def test_the_child_scripts_begin_with_the_prelude():
    for script in (_kill_fixtures.RUNNER, _strategy_fixtures.STEP_LOSSES):
        assert script.startswith(_graph_rewrites.CHILD_PRELUDE)
    namespace = {}
    exec(compile(_graph_rewrites.CHILD_PRELUDE, "<prelude>", "exec"), namespace)
    assert namespace["tests"]._graph_rewrites.turn_off is _graph_rewrites.turn_off
