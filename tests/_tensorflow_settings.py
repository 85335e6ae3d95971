"""TensorFlow's settings in the test processes: Grappler (its graph rewriting) and oneDNN's
kernels off, in the test processes and in the scripts that tests start to compare with them.

Grappler takes seconds per traced search or training step, and oneDNN's kernels cost more
than Eigen's on the tiny models of the tests (together about a quarter of the suite's time);
both change results only by rounding. A run in a child process compared bitwise with one in
the test process must round alike, so the training scripts the tests start (kill launchers,
strategy workers) begin with `CHILD_PRELUDE`, and children inherit the oneDNN setting with the
environment. What users run as they run it (the quickstart, the documented pages) gets
TensorFlow's defaults back (`user_environment`). `KT_TEST_TF_DEFAULTS=1` keeps TensorFlow's
defaults everywhere.
"""

import os

ONEDNN = "TF_ENABLE_ONEDNN_OPTS"
# The user's own value, before `for_test_process` sets it (None: not set).
_USER_ONEDNN = os.environ.get(ONEDNN)

# The first line of a test's child script.
CHILD_PRELUDE = "from tests._tensorflow_settings import turn_off_grappler; turn_off_grappler()\n"


def keeps_defaults():
    """True under KT_TEST_TF_DEFAULTS=1: TensorFlow's defaults everywhere."""
    return os.environ.get("KT_TEST_TF_DEFAULTS") == "1"


def for_test_process():
    """oneDNN's kernels off for this process and its children; call before TensorFlow loads."""
    if not keeps_defaults():
        os.environ.setdefault(ONEDNN, "0")


def turn_off_grappler():
    """Turns Grappler off in this process (before or after TensorFlow's runtime starts: it
    applies to the functions traced from then on), unless KT_TEST_TF_DEFAULTS=1."""
    if keeps_defaults():
        return
    import tensorflow as tf

    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})


def user_environment(env):
    """`env` with TensorFlow's kernel choice as the user had it (the quickstart, the pages)."""
    env = dict(env)
    if _USER_ONEDNN is None:
        env.pop(ONEDNN, None)
    else:
        env[ONEDNN] = _USER_ONEDNN
    return env
