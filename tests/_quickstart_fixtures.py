"""One shortened quickstart run shared by the tests that need a trained run folder.

`pipelines/quickstart.py` runs once per test run, as a script in a process of its own (what
`make quickstart` does), shortened (8 updates, 8 test sentences, beam 1) and on a tiny model
(1 layer, d_model 32) so that it trains, evaluates and exports in about a minute. The quickstart
tests check what it printed and wrote; the documented examples read its run folder as
runs/quickstart (tests/test_docs_examples.py); the CTranslate2 tests compare the two
precisions on its model. A background process started with the test run makes it, and every
pytest-xdist worker reads that one (tests/_shared_builds.py).
"""

import dataclasses
import pathlib
import subprocess
import sys

from tests._shared_builds import build_once
from tests._training_fixtures import REPO, subprocess_env

# configs/quickstart.yaml made tiny: 1 layer, d_model 32 (the paper's proportions kept:
# d_ff 2 * d_model here only for speed), two checkpoints averaged.
TINY_MODEL = {
    "model.num_layers": 1,
    "model.d_model": 32,
    "model.d_ff": 64,
    "model.key_dim": 8,
    "model.value_dim": 8,
    "data.vocab_size": 400,
    "data.token_budget": 512,
    "data.shuffle_buffer": 1000,
    "schedule.tokens_per_update": 512,
    "checkpoints.average_last": 2,
    "verbose": 0,
}
# 8 updates (4 evaluations, 8 checkpoints), 8 test sentences, beam 1: the export compiles one
# search instead of four (the export's own cost, most of the pipeline's time after training).
OPTIONS = [
    "--steps",
    "8",
    "--test-size",
    "8",
    "--dev-bleu-sentences",
    "8",
    "--max-extra-length",
    "8",
    "--beam-size",
    "1",
]


@dataclasses.dataclass(frozen=True)
class QuickstartRun:
    """What the shortened quickstart left: its folders and what it printed."""

    root: pathlib.Path  # the working folder it ran in
    run: pathlib.Path  # runs/quickstart: the training run folder
    exports: pathlib.Path  # saved_models: the TF Serving base folder
    stdout: str
    stderr: str


def command(run, exports):
    overrides = [arg for key, value in TINY_MODEL.items() for arg in ("--set", f"{key}={value}")]
    return [
        sys.executable,
        str(REPO / "pipelines" / "quickstart.py"),
        "--output-dir",
        str(run),
        "--export-dir",
        str(exports),
        *OPTIONS,
        *overrides,
    ]


def _write(folder):
    result = subprocess.run(
        command(folder / "runs" / "quickstart", folder / "saved_models"),
        capture_output=True,
        text=True,
        timeout=900,
        cwd=folder,
        env=subprocess_env(users_kernels=True),
    )
    (folder / "stdout.txt").write_text(result.stdout)
    (folder / "stderr.txt").write_text(result.stderr)
    (folder / "returncode.txt").write_text(str(result.returncode))


def quickstart_run(tmp_path_factory):
    """The shortened quickstart's outputs, made unless a worker of this run already did; its
    failure fails every test that needs it, with its output."""
    folder = build_once(tmp_path_factory, "quickstart", _write)
    stderr = (folder / "stderr.txt").read_text()
    returncode = int((folder / "returncode.txt").read_text())
    assert returncode == 0, f"the shortened quickstart failed:\n{stderr[-4000:]}"
    return QuickstartRun(
        folder,
        folder / "runs" / "quickstart",
        folder / "saved_models",
        (folder / "stdout.txt").read_text(),
        stderr,
    )
