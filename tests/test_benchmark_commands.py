"""Each durable benchmark runs as the documented command, `python -m benchmarks.NAME`, from
the repository root and from elsewhere (its children find the package through PYTHONPATH)."""

import importlib

import pytest

from benchmarks import common

DURABLE = [
    "train_throughput",
    "decode_throughput",
    "pipeline_throughput",
    "resume_replay",
    "step_floor",
    "serving_soak",
    "tf_serving_compat",
]


@pytest.mark.parametrize("name", DURABLE)
def test_the_module_command_starts_and_describes_itself(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    process = common.run_module(f"benchmarks.{name}", "--help", timeout=300)
    assert process.returncode == 0, process.stderr[-2000:]
    assert process.stdout.startswith("usage: ")
    # The description is the module docstring's first line, which says what it measures.
    summary = importlib.import_module(f"benchmarks.{name}").__doc__.splitlines()[0]
    assert " ".join(summary.split()) in " ".join(process.stdout.split())
