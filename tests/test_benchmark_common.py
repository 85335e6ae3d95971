"""benchmarks/common.py: skipped peers, headline ratios, the best-of-N timing loop, the machine
description and the child processes that run a benchmark module."""

import doctest
import io
import itertools
import subprocess

import pytest

from benchmarks import common as peers


def test_the_module_examples_pass_as_doctests():
    result = doctest.testmod(peers, verbose=False, report=False)
    assert result.attempted >= 6 and result.failed == 0


def test_a_missing_peer_is_skipped_with_one_line_and_its_reason():
    stream = io.StringIO()
    present, skipped = peers.importable_peers(
        ["ours", "absent", "json"], {"absent": "no_such_module_kt", "json": "json"}, stream
    )
    assert present == ["ours", "json"]
    assert list(skipped) == ["absent"] and "no_such_module_kt" in skipped["absent"]
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("# skipping peer absent:")


def rows(*entries):
    """`("ours", "xla_on", 300.0)` -> a row of system ours, mode xla_on, 300 tokens/s."""
    return [
        {"system": system, "mode": mode, "tokens_per_s": rate} for system, mode, rate in entries
    ]


def test_speed_ratios_take_our_best_over_the_best_peer_and_pair_the_modes():
    table = rows(
        ("ours", "xla_off", 300.0),
        ("ours", "xla_on", 240.0),
        ("keras_hub", "xla_off", 250.0),
        ("keras_hub", "xla_on", 200.0),
        ("torch", "eager", 120.0),
        ("torch", "compile", 400.0),
    )
    ratios = peers.speed_ratios(
        table,
        [
            ("keras_hub", "xla_off", "xla_off"),
            ("keras_hub", "xla_on", "xla_on"),
            ("torch", "eager", "xla_off"),
            ("torch", "compile", "xla_on"),
        ],
    )
    # 300 / 400; 300 / 250, 240 / 200, 300 / 120, 240 / 400.
    assert ratios["over_best_peer"] == 0.75
    assert ratios["ours_best"] == "xla_off" and ratios["best_peer"] == "torch compile"
    assert ratios["matched"] == {
        "keras_hub/xla_off": 1.2,
        "keras_hub/xla_on": 1.2,
        "torch/eager": 2.5,
        "torch/compile": 0.6,
    }


def test_a_failed_or_skipped_row_is_no_ratio_and_never_the_best_peer():
    table = rows(
        ("ours", "xla_off", 300.0),
        ("ours", "xla_on", None),
        ("torch", "eager", 150.0),
        ("torch", "compile", None),
    )
    ratios = peers.speed_ratios(
        table,
        [
            ("torch", "eager", "xla_off"),
            ("torch", "compile", "xla_on"),
            ("keras_hub", "xla_off", "xla_off"),
        ],
    )
    assert ratios["over_best_peer"] == 2.0 and ratios["best_peer"] == "torch eager"
    assert ratios["matched"] == {
        "torch/eager": 2.0,
        "torch/compile": None,
        "keras_hub/xla_off": None,
    }
    alone = peers.speed_ratios(rows(("ours", "xla_off", 300.0)), [("torch", "eager", "xla_off")])
    assert alone["over_best_peer"] is None and alone["best_peer"] is None


def test_the_timing_loop_keeps_the_best_window_and_lets_the_calls_take_turns():
    """A fake clock: each call advances it by the next of its own durations, so the windows'
    lengths are known by hand."""
    now = [0.0]
    order = []

    def call_taking(name, durations):
        durations = iter(durations)

        def call():
            order.append(name)
            now[0] += next(durations)
            return name

        return call

    waited = []
    best = peers.best_seconds_each(
        {
            # warm-up 5.0 (untimed), then windows of 2 calls: 1+3, 0.5+0.5, 2+2
            "a": call_taking("a", [5.0, 1.0, 3.0, 0.5, 0.5, 2.0, 2.0]),
            "b": call_taking("b", [9.0, 4.0, 4.0, 3.0, 1.0, 1.0, 1.0]),
        },
        steps=2,
        repeats=3,
        warmup=1,
        wait=waited.append,
        clock=lambda: now[0],
    )
    assert best == {"a": 0.5, "b": 1.0}  # (0.5 + 0.5) / 2 and (1 + 1) / 2: per call
    assert order == ["a", "b"] + ["a", "a", "b", "b"] * 3  # warm-ups, then windows by turns
    assert waited == ["a", "b"] + ["a", "b"] * 3  # each warm-up's and each window's last result


def test_best_seconds_is_the_loop_for_one_call():
    ticks = itertools.count(0.0, 0.25)  # every reading of the clock advances it by 0.25 s
    calls = []
    seconds = peers.best_seconds(
        lambda: calls.append(1), steps=4, repeats=2, warmup=3, clock=lambda: next(ticks)
    )
    assert seconds == 0.25 / 4 and len(calls) == 3 + 2 * 4


def test_the_machine_record_names_the_cpu_its_flags_and_the_versions():
    record = peers.machine_record(["json", "no_such_module_kt"])
    assert set(record) == {"cpu", "cpu_flags", "cpus", "arch", "versions"}
    assert set(record["cpu_flags"]) <= set(peers.CPU_FLAGS)
    assert list(record["versions"]) == ["python", "json"]  # a missing module is left out
    line = peers.machine_line(record, threads=3)
    assert line.startswith(f"machine: {record['cpu']} (") and ", threads 3; python " in line


def test_a_child_runs_a_benchmark_module_from_any_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    process = peers.run_module("benchmarks.common", python=None, timeout=120)
    assert process.returncode == 0, process.stderr
    assert peers.module_command("benchmarks.x", "--worker", 3)[1:] == [
        "-m",
        "benchmarks.x",
        "--worker",
        "3",
    ]
    assert peers.child_environment()["PYTHONPATH"].split(":") == [str(peers.ROOT), "/elsewhere"]
    with pytest.raises(subprocess.TimeoutExpired):
        peers.run_module("benchmarks.common", timeout=1e-3)
