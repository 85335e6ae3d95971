"""benchmarks/micro/optimizer_throughput.py: the Keras sides make the same update, a missing PyTorch
is one line, and the JSON line holds the headline figures."""

import json
from importlib.util import find_spec

from benchmarks.micro import optimizer_throughput as bench
from keras_transformer.training.config import TrainingConfig
from tests._training_fixtures import REPO


def recipe(name):
    """`(TrainingConfig, TransformerConfig)` of configs/NAME.yaml, the recipe users run."""
    config = TrainingConfig.from_file(REPO / "configs" / f"{name}.yaml")
    return config, config.transformer_config(config.data.vocab_size)


def test_keras_and_fused_agree_and_the_json_line_holds_the_headline(capsys):
    headline = bench.main(["--configs", "tiny", "--steps", "1", "--repeats", "1"])
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == json.loads(json.dumps(headline))
    row = headline["tiny"]
    # 1 layer, d_model 64, d_ff 256, V 8000, tied embeddings. Attention 4 x (64 x 64 + 64)
    # = 16640, feed-forward 2 x 64 x 256 + 256 + 64 = 33088, LayerNorm 128: encoder layer
    # 16640 + 33088 + 2 x 128, decoder layer 2 x 16640 + 33088 + 3 x 128.
    assert row["params"] == 8000 * 64 + 49984 + 66752
    assert row["max_relative_difference"] < 1e-5
    assert abs(row["fused_over_keras"] - row["keras_ms"] / row["fused_ms"]) < 0.02
    assert ("torch_ms" in row) != ("torch" in headline["skipped_peers"])
    # A peer is skipped only where it is not installed (CI has every extra).
    assert ("torch" in headline["skipped_peers"]) == (find_spec("torch") is None)


def test_the_multi30k_row_has_the_recipes_dims():
    config, model = recipe("multi30k")
    assert bench.CONFIGS["multi30k"] == (
        model.num_layers,
        model.d_model,
        model.d_ff,
        model.num_heads,
        config.data.vocab_size,
    )


def test_a_missing_pytorch_is_skipped_with_one_line(capsys, monkeypatch):
    monkeypatch.setitem(bench.PEER_MODULES, "torch", "no_such_module_kt")
    headline = bench.main(["--configs", "tiny", "--steps", "1", "--repeats", "1"])
    out, err = capsys.readouterr()
    assert headline["skipped_peers"] == {"torch": "No module named 'no_such_module_kt'"}
    notices = [line for line in err.splitlines() if line.startswith("# skipping peer")]
    assert notices == [
        "# skipping peer torch: No module named 'no_such_module_kt' "
        '(pip install -e ".[bench]" installs every peer)'
    ]
    assert "Traceback" not in out + err
    assert "torch_ms" not in headline["tiny"]


def test_the_comparison_sees_a_wrong_update():
    """`same_updates` is what vouches for FusedAdam in the table: a fused side that skipped
    its bias correction would show a large difference."""
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_transformer._keras_internals import adam_slots

    variables = [keras.Variable(np.linspace(-1, 1, 12, dtype="float32").reshape(3, 4))]
    gradients = [tf.constant(np.full((3, 4), 1e-3, "float32"))]
    assert bench.same_updates(variables, gradients) < 1e-6
    # Without the correction the first steps are 1 - 0.1 / sqrt(0.02) = 0.29 smaller: about
    # 3 x 0.29 x lr = 2e-4 off after three updates, 200x the agreement above.

    class Uncorrected(keras.optimizers.Adam):  # no sqrt(1 - beta_2^t) / (1 - beta_1^t)
        def update_step(self, gradient, variable, learning_rate):
            m, v = adam_slots(self, variable)
            self.assign_add(m, (gradient - m) * (1 - self.beta_1))
            self.assign_add(v, (gradient * gradient - v) * (1 - self.beta_2))
            self.assign_sub(variable, learning_rate * m / (keras.ops.sqrt(v) + self.epsilon))

    original = bench.FusedAdam
    bench.FusedAdam = Uncorrected
    try:
        assert bench.same_updates(variables, gradients) > 1e-4
    finally:
        bench.FusedAdam = original
