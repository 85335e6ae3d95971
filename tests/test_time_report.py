"""tests/_time_report.py: each test's wall time, its process's CPU time and its children's, and
the report by file."""

import textwrap

from tests import _time_report

pytest_plugins = ("pytester",)

TESTS = textwrap.dedent("""
    import subprocess, sys, time

    def test_waits():
        time.sleep(0.3)

    def test_starts_a_busy_child():
        subprocess.run([sys.executable, "-c", "sum(range(30_000_000))"], check=True)
""")


def test_records_wall_own_and_children_cpu_per_test(pytester, monkeypatch, tmp_path):
    pytester.makepyfile(test_demo=TESTS)
    prefix = str(tmp_path / "times")
    monkeypatch.setenv(_time_report.PREFIX_VARIABLE, prefix)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # a session of its own
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "tests._time_report"
    )
    result.assert_outcomes(passed=2)
    records = {r["id"].split("::")[1]: r for r in _time_report.read_records(prefix)}
    assert set(records) == {"test_waits", "test_starts_a_busy_child"}
    waits, busy = records["test_waits"], records["test_starts_a_busy_child"]
    assert waits["wall"] >= 0.3 and waits["cpu"] < 0.2 and waits["children_cpu"] == 0
    # The child's loop is counted as the child's CPU, not the test process's.
    assert busy["children_cpu"] > 0.2 and busy["children_cpu"] > busy["cpu"]
    assert {r["worker"] for r in records.values()} == {"main"}

    lines = _time_report.report(list(records.values()))
    assert lines[0].startswith("2 tests: wall ")
    assert lines[2].endswith(" 2  test_demo.py")
    [row] = _time_report.by_file(records.values()).values()
    assert row["tests"] == 2
    assert row["children_cpu"] == busy["children_cpu"]


def test_off_without_the_variable(pytester, monkeypatch, tmp_path):
    pytester.makepyfile(test_demo="def test_nothing():\n    pass\n")
    monkeypatch.delenv(_time_report.PREFIX_VARIABLE, raising=False)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "tests._time_report")
    result.assert_outcomes(passed=1)
    assert _time_report.read_records(str(tmp_path / "times")) == []
    assert not list(pytester.path.glob("*.jsonl"))
