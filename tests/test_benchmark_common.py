"""benchmarks/peers.py (skipped peers, headline ratios) and the same-work builds of
benchmarks/train_throughput.py."""

import doctest
import io

import pytest

from tests._training_fixtures import load_benchmark as load

peers = load("peers")


def test_the_module_examples_pass_as_doctests():
    # As `python -m doctest benchmarks/peers.py` runs them.
    result = doctest.testmod(peers, verbose=False, report=False)
    assert result.attempted >= 4 and result.failed == 0


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


def test_the_three_systems_have_the_same_parameters_at_the_same_dims():
    """Same work: one tied embedding for source, target and output, no output bias, no
    learned positions, no final stack LayerNorm on any side. Each of those differences
    changes the count: ours (tied, 2 x 100 x 32 fewer than untied) is 24576 at these dims,
    the sum of embedding 3200, encoder layer 8544 and decoder layer 12832 below."""
    pytest.importorskip("torch")
    throughput = load("train_throughput")
    dims, vocab_size = (1, 32, 64, 4), 100  # N, d_model, d_ff, h
    d, f = 32, 64
    attention = 4 * (d * d + d)
    norm = 2 * d
    feed_forward = d * f + f + f * d + d
    expected = (
        vocab_size * d
        + (attention + feed_forward + 2 * norm)
        + (2 * attention + feed_forward + 3 * norm)
    )
    ours = throughput.build_ours(dims, vocab_size, "fp32", 0.0).transformer.count_params()
    # --backend jax trains the Transformer itself (TrainingModel is TensorFlow-only).
    plain = throughput.build_ours(dims, vocab_size, "fp32", 0.0, plain=True)
    assert type(plain).__name__ == "Transformer" and plain.count_params() == expected
    keras_hub = throughput.build_keras_hub(dims, vocab_size, "fp32", 0.0).count_params()
    torch_model = throughput.build_torch(dims, vocab_size, 0.0)
    torch_count = sum(p.numel() for p in torch_model.parameters())
    assert expected == 24576
    assert ours == keras_hub == torch_count == expected


def test_bf16_rows_are_skipped_only_where_the_bf16_matmul_is_under_a_quarter_of_fp32():
    throughput = load("train_throughput")
    peaks = {
        "fp32": {"tensorflow": 30e9, "torch": 40e9},
        "bf16": {"tensorflow": 7.5e9, "torch": 0.4e9},
    }  # exactly 0.25x, and 0.01x
    assert throughput.slow_bf16(peaks, "tensorflow") is None
    reason = throughput.slow_bf16(peaks, "torch")
    assert reason.startswith("torch's bfloat16 matmul runs at 0.4 GFLOP/s") and "40.0" in reason
    assert throughput.slow_bf16({"fp32": peaks["fp32"]}, "torch") is None  # bf16 not measured


def test_every_step_gets_the_same_batch_from_tf_data_and_from_the_tiled_jax_arrays():
    throughput = load("train_throughput")
    source, target, labels = data = throughput.make_batch(4, 5, 100)
    spec = {"warmup": 1, "repeats": 2, "steps": 3}  # 7 steps in all
    tiled = throughput.keras_inputs({**spec, "backend": "jax"}, data)
    assert tiled["batch_size"] == 4 and tiled["x"]["source_ids"].shape == (28, 5)
    for step in range(7):
        rows = slice(4 * step, 4 * step + 4)
        assert (tiled["x"]["source_ids"][rows] == source).all()
        assert (tiled["x"]["target_ids"][rows] == target).all()
        assert (tiled["y"][rows] == labels).all()
    pytest.importorskip("tensorflow")
    repeated = throughput.keras_inputs({**spec, "backend": "tensorflow"}, data, nested=True)
    assert repeated["steps_per_epoch"] == 7
    ((features, batch_labels),) = next(iter(repeated["x"]))
    assert (features["source_ids"].numpy() == source).all()
    assert (batch_labels.numpy() == labels).all()


def test_both_keras_sides_train_with_the_papers_adam_ours_fused(monkeypatch):
    """Same update on both Keras sides: Adam (0.9, 0.98, 1e-9) on the same Noam schedule;
    ours is `FusedAdam` (part of our product), keras-hub gets Keras's own Adam."""
    pytest.importorskip("keras_hub")
    import keras

    from keras_transformer import FusedAdam, NoamSchedule

    throughput = load("train_throughput")
    optimizers = []

    def fake_time_keras(model, inputs, steps, repeats, warmup):
        optimizers.append(model.optimizer)
        return 1.0

    monkeypatch.setattr(throughput, "time_keras", fake_time_keras)
    spec = {
        "dims": (1, 32, 64, 4),
        "vocab_size": 100,
        "precision": "fp32",
        "attention_dropout": 0.0,
        "backend": "tensorflow",
        "mode": "xla_off",
        "warmup": 1,
        "repeats": 1,
        "steps": 1,
    }
    data = throughput.make_batch(2, 5, 100)
    throughput.run_ours(spec, data)
    throughput.run_keras_hub(spec, data)
    ours, hub = optimizers
    assert type(ours) is FusedAdam and type(hub) is keras.optimizers.Adam
    for optimizer in (ours, hub):
        assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)
        assert isinstance(optimizer._learning_rate, NoamSchedule)
        assert optimizer._learning_rate.get_config() == {
            "d_model": 32,
            "warmup_steps": 4000,
            "scale": 1.0,
        }
