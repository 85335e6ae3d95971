"""Where the suite's time goes: a pytest plugin that records, for every test, its wall time,
the CPU time of its process and that of the child processes it started and waited for
(those forked for it by tests/_preloaded_python.py's servers included).

Wall time alone hides why a test is long on the 2-core CI machine: its own work, the work of
the interpreters it starts, or waiting (a shared build's lock, the other worker's processes
holding the cores). Off unless asked for:

    KT_TIME_REPORT=/tmp/times .venv/bin/python -m pytest -n 2 --dist loadfile -p tests._time_report
    .venv/bin/python -m tests._time_report /tmp/times

The first writes one JSON line per test to /tmp/times-WORKER.jsonl (the setup, call and
teardown of the test together); the second prints the totals and the files by CPU time.
"""

import collections
import glob
import json
import os
import resource
import sys
import time

import pytest

from tests import _preloaded_python

PREFIX_VARIABLE = "KT_TIME_REPORT"


def _cpu_seconds(who):
    usage = resource.getrusage(who)
    seconds = usage.ru_utime + usage.ru_stime
    if who == resource.RUSAGE_CHILDREN:  # with the children forked for this process
        seconds += _preloaded_python.children_cpu()
    return seconds


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    prefix = os.environ.get(PREFIX_VARIABLE)
    if not prefix:
        yield
        return
    started = time.time()
    own, children = _cpu_seconds(resource.RUSAGE_SELF), _cpu_seconds(resource.RUSAGE_CHILDREN)
    yield
    record = {
        "id": item.nodeid,
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
        "start": started,
        "wall": time.time() - started,
        "cpu": _cpu_seconds(resource.RUSAGE_SELF) - own,
        "children_cpu": _cpu_seconds(resource.RUSAGE_CHILDREN) - children,
    }
    with open(f"{prefix}-{record['worker']}.jsonl", "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")


def read_records(prefix):
    """Every record written under `prefix` (all workers)."""
    records = []
    for path in sorted(glob.glob(f"{glob.escape(prefix)}-*.jsonl")):
        with open(path, encoding="utf-8") as lines:
            records.extend(json.loads(line) for line in lines if line.strip())
    return records


def by_file(records):
    """`{file: {"tests", "wall", "cpu", "children_cpu"}}`, summed over each file's tests."""
    files = collections.defaultdict(lambda: dict(tests=0, wall=0.0, cpu=0.0, children_cpu=0.0))
    for record in records:
        totals = files[record["id"].split("::", 1)[0]]
        totals["tests"] += 1
        for key in ("wall", "cpu", "children_cpu"):
            totals[key] += record[key]
    return dict(files)


def report(records, top=40):
    """The report's lines: the totals, then the `top` files by CPU time (own and children's)."""
    wall = sum(r["wall"] for r in records)
    cpu = sum(r["cpu"] for r in records)
    children = sum(r["children_cpu"] for r in records)
    lines = [
        f"{len(records)} tests: wall {wall:.0f} s, own CPU {cpu:.0f} s, children's CPU "
        f"{children:.0f} s, wall beyond CPU {max(0.0, wall - cpu - children):.0f} s",
        f"{'cpu':>7} {'wall':>7} {'own':>7} {'child':>7} {'tests':>5}  file",
    ]
    files = sorted(by_file(records).items(), key=lambda f: -(f[1]["cpu"] + f[1]["children_cpu"]))
    for name, t in files[:top]:
        lines.append(
            f"{t['cpu'] + t['children_cpu']:7.1f} {t['wall']:7.1f} {t['cpu']:7.1f} "
            f"{t['children_cpu']:7.1f} {t['tests']:5d}  {name}"
        )
    return lines


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: python -m tests._time_report PREFIX (the {PREFIX_VARIABLE} of the run)")
    found = read_records(sys.argv[1])
    if not found:
        sys.exit(
            f"no records under {sys.argv[1]}-*.jsonl: was the run made with {PREFIX_VARIABLE}?"
        )
    print("\n".join(report(found)))
