"""benchmarks/micro/dropout_throughput.py: rows for both precisions, a missing PyTorch is one line,
the kept-fraction check sees a broken dropout, and the JSON line holds the figures."""

import json
from importlib.util import find_spec

import numpy as np

from benchmarks.micro import dropout_throughput as bench
from keras_transformer.training.config import TrainingConfig
from tests._training_fixtures import REPO


def recipe(name):
    """`(TrainingConfig, TransformerConfig)` of configs/NAME.yaml, the recipe users run."""
    config = TrainingConfig.from_file(REPO / "configs" / f"{name}.yaml")
    return config, config.transformer_config(config.data.vocab_size)


def test_rows_for_both_precisions_and_the_json_line_holds_the_headline(capsys):
    headline = bench.main(["--configs", "small", "--steps", "1", "--repeats", "1"])
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == json.loads(json.dumps(headline))
    for precision in ("fp32", "bf16"):
        row = headline["small"][precision]
        assert row["ours_kept_fraction_plausible"] is True
        assert abs(row["ours_over_keras"] - row["keras"] / row["ours"]) < 0.02
        assert ("torch" in row) != ("torch" in headline["skipped_peers"])
        # A peer is skipped only where it is not installed (CI has every extra).
        assert ("torch" in headline["skipped_peers"]) == (find_spec("torch") is None)
        assert min(row["identity"], row["keras"], row["ours"]) > 0


def test_the_multi30k_shape_is_the_recipes():
    config, model = recipe("multi30k")
    assert bench.SHAPES["multi30k"] == (config.data.token_budget, model.d_model, model.dropout)


def test_a_missing_pytorch_is_skipped_with_one_line(capsys, monkeypatch):
    monkeypatch.setitem(bench.PEER_MODULES, "torch", "no_such_module_kt")
    headline = bench.main(["--configs", "small", "--steps", "1", "--repeats", "1"])
    out, err = capsys.readouterr()
    assert headline["skipped_peers"] == {"torch": "No module named 'no_such_module_kt'"}
    notices = [line for line in err.splitlines() if line.startswith("# skipping peer")]
    assert notices == [
        "# skipping peer torch: No module named 'no_such_module_kt' "
        '(pip install -e ".[bench]" installs every peer)'
    ]
    assert "Traceback" not in out + err


def test_the_kept_fraction_check_sees_a_wrong_rate():
    rng = np.random.default_rng(0)
    shape = (1024, 256)
    kept_70 = np.where(rng.random(shape) >= 0.3, 1.0, 0.0).astype("float32")
    assert bench.kept_fraction_is_plausible(kept_70, 0.3)
    assert not bench.kept_fraction_is_plausible(kept_70, 0.29)  # 70% kept is not 71%
    assert not bench.kept_fraction_is_plausible(np.ones(shape, "float32"), 0.3)


def test_a_dropout_that_keeps_everything_is_flagged(capsys, monkeypatch):

    class KeepsAll(bench.Dropout):
        def call(self, inputs, training=False):
            return inputs / (1.0 - self.rate)

    monkeypatch.setattr(bench, "Dropout", KeepsAll)
    headline = bench.main(["--configs", "small", "--steps", "1", "--repeats", "1"])
    out = capsys.readouterr().out
    assert headline["small"]["bf16"]["ours_kept_fraction_plausible"] is False
    assert "ours at small bf16: the kept fraction is not 1 - rate" in out
