"""benchmarks/micro/layer_norm_throughput.py: rows for both precisions, ours checked against Keras's,
a missing PyTorch is one line, and the JSON line holds the figures."""

import json
from importlib.util import find_spec

from benchmarks.micro import layer_norm_throughput as bench
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
    for precision, bound in (("fp32", 1e-5), ("bf16", 2e-2)):
        row = headline["small"][precision]
        assert row["max_relative_difference"] < bound
        assert abs(row["ours_over_keras"] - row["keras"] / row["ours"]) < 0.02
        assert ("torch" in row) != ("torch" in headline["skipped_peers"])
        # A peer is skipped only where it is not installed (CI has every extra).
        assert ("torch" in headline["skipped_peers"]) == (find_spec("torch") is None)
        assert min(row["identity"], row["keras"], row["ours"]) > 0


def test_a_wrong_layer_norm_shows_in_the_difference(capsys, monkeypatch):

    class NoCentring(bench.LayerNormalization):
        def call(self, inputs):
            return super().call(inputs) + 0.1 * self.beta

    monkeypatch.setattr(bench, "LayerNormalization", NoCentring)
    headline = bench.main(["--configs", "small", "--steps", "1", "--repeats", "1"])
    assert headline["small"]["fp32"]["max_relative_difference"] > 1e-3


def test_the_shapes_are_the_recipes():
    for name, recipe_name in (("multi30k", "multi30k"), ("parsing", "ptb_wsj_gum_cpu")):
        config, model = recipe(recipe_name)
        assert bench.SHAPES[name] == (config.data.token_budget, model.d_model)


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
