"""benchmarks/train_systems.py, matmul_peaks.py: the three systems do the same work
(parameters, batch, optimizer), and slow bf16 rows are skipped with their reason."""

import pytest

from benchmarks import matmul_peaks as peaks_module
from benchmarks import train_systems as systems


def test_the_three_systems_have_the_same_parameters_at_the_same_dims():
    """Same work: one tied embedding for source, target and output, no output bias, no
    learned positions, no final stack LayerNorm on any side. Each of those differences
    changes the count: ours (tied, 2 x 100 x 32 fewer than untied) is 24576 at these dims,
    the sum of embedding 3200, encoder layer 8544 and decoder layer 12832 below."""
    pytest.importorskip("torch")
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
    ours = systems.build_ours(dims, vocab_size, "fp32", 0.0).transformer.count_params()
    # --backend jax trains the Transformer itself (TrainingModel is TensorFlow-only).
    plain = systems.build_ours(dims, vocab_size, "fp32", 0.0, plain=True)
    assert type(plain).__name__ == "Transformer" and plain.count_params() == expected
    keras_hub = systems.build_keras_hub(dims, vocab_size, "fp32", 0.0).count_params()
    torch_model = systems.build_torch(dims, vocab_size, 0.0)
    torch_count = sum(p.numel() for p in torch_model.parameters())
    assert expected == 24576
    assert ours == keras_hub == torch_count == expected


def test_bf16_rows_are_skipped_only_where_the_bf16_matmul_is_under_a_quarter_of_fp32():
    peaks = {
        "fp32": {"tensorflow": 30e9, "torch": 40e9},
        "bf16": {"tensorflow": 7.5e9, "torch": 0.4e9},
    }  # exactly 0.25x, and 0.01x
    assert peaks_module.slow_bf16(peaks, "tensorflow") is None
    reason = peaks_module.slow_bf16(peaks, "torch")
    assert reason.startswith("torch's bfloat16 matmul runs at 0.4 GFLOP/s") and "40.0" in reason
    assert peaks_module.slow_bf16({"fp32": peaks["fp32"]}, "torch") is None  # bf16 not measured


def test_every_step_gets_the_same_batch_from_tf_data_and_from_the_tiled_jax_arrays():
    source, target, labels = data = systems.make_batch(4, 5, 100)
    spec = {"warmup": 1, "repeats": 2, "steps": 3}  # 7 steps in all
    tiled = systems.keras_inputs({**spec, "backend": "jax"}, data)
    assert tiled["batch_size"] == 4 and tiled["x"]["source_ids"].shape == (28, 5)
    for step in range(7):
        rows = slice(4 * step, 4 * step + 4)
        assert (tiled["x"]["source_ids"][rows] == source).all()
        assert (tiled["x"]["target_ids"][rows] == target).all()
        assert (tiled["y"][rows] == labels).all()
    pytest.importorskip("tensorflow")
    repeated = systems.keras_inputs({**spec, "backend": "tensorflow"}, data, nested=True)
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

    optimizers = []

    def fake_time_keras(model, inputs, steps, repeats, warmup):
        optimizers.append(model.optimizer)
        return 1.0

    monkeypatch.setattr(systems, "time_keras", fake_time_keras)
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
    data = systems.make_batch(2, 5, 100)
    systems.run_ours(spec, data)
    systems.run_keras_hub(spec, data)
    ours, hub = optimizers
    assert type(ours) is FusedAdam and type(hub) is keras.optimizers.Adam
    for optimizer in (ours, hub):
        assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)
        schedule = keras.optimizers.schedules.deserialize(optimizer.get_config()["learning_rate"])
        assert isinstance(schedule, NoamSchedule)
        assert schedule.get_config() == {
            "d_model": 32,
            "warmup_steps": 4000,
            "scale": 1.0,
        }
