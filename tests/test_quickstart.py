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


def test_demo_expectations_are_the_corpus_renderings():
    """The quickstart marks a demo translation that differs from its expected German; those
    expectations must be what the corpus generator itself renders for the same English."""
    import importlib.util

    from keras_transformer.data.number_expressions import number_expressions_corpus

    spec = importlib.util.spec_from_file_location("quickstart",
                                                  ROOT / "pipelines" / "quickstart.py")
    quickstart = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quickstart)
    generated = {}
    for seed in range(4):
        for split in number_expressions_corpus(seed=seed).values():
            generated.update(split)
    found = [english for english, _ in quickstart.SAMPLES if english in generated]
    assert len(found) >= 4, found  # most samples occur in some corpus: the check has teeth
    for english, expected in quickstart.SAMPLES:
        assert generated.get(english, expected) == expected, english
