"""Grappler, TensorFlow's graph rewriting, off in the test processes and in the scripts
that tests start to compare with them.

Grappler takes seconds per traced search or training step (about a fifth of the suite's time)
and changes results only by rounding (fused ops): a run in a child process compared bitwise
with one in the test process must rewrite alike, so the training scripts the tests start
(kill launchers, strategy workers) begin with `CHILD_PRELUDE`. What users run as they run it
(the quickstart, the documented pages, the CLI, a SavedModel loaded without our code) keeps
TensorFlow's defaults. `KT_TEST_GRAPPLER=1` keeps Grappler on everywhere.
"""

import os

# The first line of a test's child script.
CHILD_PRELUDE = "import tests._graph_rewrites; tests._graph_rewrites.turn_off()\n"


def turn_off():
    """Turns Grappler off in this process (before or after TensorFlow's runtime starts: it
    applies to the functions traced from then on), unless KT_TEST_GRAPPLER=1."""
    if os.environ.get("KT_TEST_GRAPPLER") == "1":
        return
    import tensorflow as tf

    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
