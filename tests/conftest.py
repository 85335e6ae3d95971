"""Shared test settings: the TensorFlow backend unless KERAS_BACKEND says otherwise, quiet
TensorFlow logs, `data_dir` for tests that need ../shared/data (KT_DATA_DIR), and
KT_FAIL_ON_SKIP=1 (set by .ci/run): a skipped test fails instead, with its reason, since CI
has the data and every extra a test may skip without (a local run without them still skips).
"""

import os
import pathlib

import pytest

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402


def _fail_on_skip():
    return os.environ.get("KT_FAIL_ON_SKIP") == "1"


def _as_failure(report):
    """Turns a skipped report into a failure that gives the skip's reason."""
    if not (_fail_on_skip() and report.skipped and not hasattr(report, "wasxfail")):
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    report.outcome = "failed"
    report.longrepr = f"skipped under KT_FAIL_ON_SKIP=1 (CI has the data and every extra): {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _as_failure(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    # A module-level importorskip skips the whole file at collection.
    outcome = yield
    _as_failure(outcome.get_result())


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(1234)


@pytest.fixture
def python_loops():
    """`keras.ops.while_loop` as a Python loop on every backend, so that a scripted decoder's
    Python calls are its steps: JAX otherwise traces a loop's body once (TensorFlow runs
    eagerly here already)."""
    if keras.backend.backend() != "jax":
        yield
        return
    import jax

    with jax.disable_jit():
        yield


@pytest.fixture(scope="session")
def data_dir():
    """The shared real data (../shared/data); skips the test with the reason when absent."""
    location = os.environ.get("KT_DATA_DIR")
    if not location:
        pytest.skip("KT_DATA_DIR is not set: point it at ../shared/data to run this test")
    path = pathlib.Path(location)
    if not path.is_dir():
        pytest.skip(f"KT_DATA_DIR={location} is not a directory")
    return path


@pytest.fixture(scope="session")
def shared_export(tmp_path_factory):
    """The SavedModel that the signature tests share (tests/_export_fixtures.py): one tiny
    character model exported once per run, with its model and vocabulary in-process."""
    if keras.backend.backend() != "tensorflow":
        pytest.skip("SavedModel export needs the TensorFlow backend")
    from tests import _export_fixtures

    return _export_fixtures.shared_export(tmp_path_factory)
