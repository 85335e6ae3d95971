"""KT_FAIL_ON_SKIP=1 (.ci/run): a skipped test fails with its reason; without it, it skips."""

import subprocess
import sys
import textwrap

from tests._training_fixtures import REPO, subprocess_env


def _pytest(directory, **env):
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(directory)],
        capture_output=True,
        text=True,
        cwd=directory,
        env=subprocess_env(**env),
        timeout=240,
    )


def test_a_skip_fails_under_kt_fail_on_skip(tmp_path):
    # The suite's own hooks, in a conftest of a folder of two tests.
    (tmp_path / "conftest.py").write_text("from tests.conftest import *  # noqa: F403\n")
    (tmp_path / "test_demo.py").write_text(
        textwrap.dedent("""
            import pytest

            def test_without_its_data():
                pytest.skip("the data is absent")

            def test_that_runs():
                pass
        """)
    )
    assert str(REPO) in subprocess_env()["PYTHONPATH"]
    failing = _pytest(tmp_path, KT_FAIL_ON_SKIP="1")
    assert failing.returncode == 1, failing.stdout[-3000:]
    assert "1 failed, 1 passed" in failing.stdout
    assert "skipped under KT_FAIL_ON_SKIP=1" in failing.stdout
    assert "the data is absent" in failing.stdout
    local = _pytest(tmp_path, KT_FAIL_ON_SKIP="0")
    assert local.returncode == 0 and "1 passed, 1 skipped" in local.stdout, local.stdout[-3000:]
