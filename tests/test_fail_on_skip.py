"""KT_FAIL_ON_SKIP=1 (.ci/run): a skipped test fails with its reason; without it, it skips."""

import textwrap

pytest_plugins = ("pytester",)


def test_a_skip_fails_under_kt_fail_on_skip(pytester, monkeypatch):
    # The suite's own hooks, in a conftest of a folder of two tests, run by pytest in this
    # process (its own session, as `pytest FOLDER` runs it).
    pytester.makeconftest("from tests.conftest import *  # noqa: F403\n")
    pytester.makepyfile(
        test_demo=textwrap.dedent("""
            import pytest

            def test_without_its_data():
                pytest.skip("the data is absent")

            def test_that_runs():
                pass
        """)
    )
    monkeypatch.setenv("KT_FAIL_ON_SKIP", "1")
    failing = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:xdist")
    failing.assert_outcomes(failed=1, passed=1)
    text = failing.stdout.str()
    assert "skipped under KT_FAIL_ON_SKIP=1" in text and "the data is absent" in text
    monkeypatch.setenv("KT_FAIL_ON_SKIP", "0")
    local = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:xdist")
    local.assert_outcomes(passed=1, skipped=1)
    assert local.ret == 0
