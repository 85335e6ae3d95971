"""Shared test settings: the TensorFlow backend unless KERAS_BACKEND says otherwise, quiet
TensorFlow logs, `data_dir` for tests that need ../shared/data (KT_DATA_DIR), and
KT_FAIL_ON_SKIP=1 (set by .ci/run): a skipped test fails instead, with its reason, since CI
has the data and every extra a test may skip without (a local run without them still skips).
"""

import gc
import os
import pathlib

import pytest

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from tests import _tensorflow_settings  # noqa: E402

# oneDNN's kernels and Grappler off in the test processes (tests/_tensorflow_settings.py says
# why, and what keeps TensorFlow's defaults); oneDNN's before TensorFlow loads.
_tensorflow_settings.for_test_process()

import keras  # noqa: E402

if keras.backend.backend() == "tensorflow":
    _tensorflow_settings.turn_off_grappler()


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


# The tests `make test-fast` leaves out (marked `slow` here, in one place): those that need the
# shortened quickstart run, and these, of half a minute or more each on two cores.
SLOW = (
    "tests/test_docs_examples.py::test_documented_examples_run",
    "tests/test_benchmark_decode_throughput.py::test_trained_",
    "tests/test_export.py::test_loads_in_a_fresh_process_without_our_code",
    "tests/test_export.py::test_every_signature_answers_the_session_loader",
    "tests/test_export_precision.py::test_bf16_export",
    "tests/test_training_pipelines.py::test_multi30k_short_schedule_end_to_end",
    "tests/test_wmt14_pipelines.py::test_wmt14_recipe_trains",
    "tests/test_training_resume.py",
    "tests/test_training_strategy_resume.py",
    "tests/test_training_strategies.py",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.startswith(SLOW) or "quickstart_run" in item.fixturenames:
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under `--dist loadfile` (`make test`): one unit of work per file, except the documented
    pages, one unit each (tests/_xdist_scheduling.py)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from tests._xdist_scheduling import FileScheduling

    return FileScheduling(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _as_failure(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    # A module-level importorskip skips the whole file at collection.
    outcome = yield
    _as_failure(outcome.get_result())


@pytest.fixture(scope="session", autouse=True)
def _imports_out_of_full_collections():
    """What exists once the tests are collected (the imports) lives all session: the garbage
    collector's full passes skip it from the first test on (Keras runs one per quantized layer
    and per `clear_session`; docs/decisions.md#gc-freeze-after-collection)."""
    if not gc.get_freeze_count():
        gc.freeze()


@pytest.fixture(scope="session", autouse=True)
def _temporary_files_under_pytest(tmp_path_factory):
    """Points `tempfile` (and TMPDIR, for child processes) at this run's pytest folder, so that
    what code under test makes with `tempfile.mkdtemp` and never removes (a benchmark's
    CTranslate2 export, a cached vocabulary) goes with pytest's own clean-up, not into /tmp."""
    import tempfile

    folder = str(tmp_path_factory.mktemp("tempfile"))
    saved = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir, os.environ["TMPDIR"] = folder, folder
    yield
    tempfile.tempdir = saved[0]
    if saved[1] is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = saved[1]


@pytest.fixture(scope="session", autouse=True)
def _shared_builds_in_background(request, tmp_path_factory):
    """Makes the shared run and export that the collected tests read in a background process
    from the start (tests/_shared_builds.py): one process per run, the first xdist worker's
    (or the only process's)."""
    from tests import _shared_builds

    process = None
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0":
        names = _shared_builds.needed_builds(request.session.items)
        if keras.backend.backend() != "tensorflow":  # the export's tests skip there
            names = [name for name in names if name != "shared_export"]
        process = _shared_builds.start_in_background(tmp_path_factory, names)
    yield
    _shared_builds.stop(process)


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


@pytest.fixture(scope="session")
def quickstart_run(tmp_path_factory):
    """The shortened quickstart's run folder and output (tests/_quickstart_fixtures.py): one
    run of pipelines/quickstart.py, on a tiny model, per test run."""
    from tests import _quickstart_fixtures

    return _quickstart_fixtures.quickstart_run(tmp_path_factory)
