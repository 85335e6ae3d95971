"""A shortened quickstart end to end: every output exists and the SavedModel translates."""

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_short_quickstart_produces_every_output(tmp_path):
    run, exports = tmp_path / "run", tmp_path / "saved_models"
    result = subprocess.run(
        [sys.executable, str(ROOT / "pipelines" / "quickstart.py"), "--output-dir", str(run),
         "--export-dir", str(exports), "--steps", "40", "--test-size", "8",
         "--dev-bleu-sentences", "8", "--max-extra-length", "8"],
        capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 40 and 0.0 <= summary["exact_match"] <= 1.0
    for path in ("vocab.model", "config.json", "model.keras", "averaged.keras", "history.json",
                 "learning_curve.png", "attention.png", "test.hyp.de", "logs"):
        assert (run / path).exists(), path
    assert any((run / "checkpoints").glob("ckpt-*.index"))
    assert (run / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert (exports / "quickstart" / "1" / "saved_model.pb").is_file()
    # The SavedModel answered through its signature in a fresh process: one line per sample.
    served = [line for line in result.stdout.splitlines() if " -> " in line]
    assert len(served) == 6
