"""benchmarks/step_floor.py: the floor runs exactly the products of a train step, and its JSON
line holds each side's step and the ratios."""

import json

import pytest

from benchmarks import matmul_peaks
from benchmarks import step_floor as floor
from benchmarks import train_systems as systems


def test_a_tiny_step_has_the_hand_counted_products():
    # N 1, d_model 4, d_ff 8, h 2, V 10, one sentence of 2 tokens a side. Forward, 2 x M x K x N
    # each: 12 projections of 2x4x4 (768), feed-forward in and out in both stacks (256 + 256),
    # three attentions of 2 heads with scores and sums of 2x2x2 (96 + 96), output 2x4x10 (160):
    # 1632; with the two backward products of each, 3 x 1632.
    products = floor.step_products(1, 4, 8, 2, 10, 1, 2)
    assert floor.product_flops(products) == 3 * 1632
    assert {form for *_, form in products} == {"forward", "input_grad", "weight_grad"}
    assert len(products) == 3 * 6  # six kinds of forward product, each with two gradients
    assert (12, 1, 2, 4, 4, "forward") in products and (1, 1, 2, 4, 10, "weight_grad") in products
    assert (3, 2, 2, 2, 2, "input_grad") in products  # scores: batch x heads of (L, d/h, L)


@pytest.mark.parametrize("name", sorted(systems.CONFIGS))
def test_the_products_are_the_work_the_mfu_formula_counts(name):
    # Two formulas written apart: matmul_peaks.py's FLOPs by layer, these by product.
    dims = systems.CONFIGS[name]
    products = floor.step_products(*dims, 8000, 32, 32)
    assert floor.product_flops(products) == matmul_peaks.training_flops(*dims[:3], 8000, 32, 32)


def test_the_json_line_holds_each_sides_step_and_the_ratios(capsys):
    floor.main(
        [
            "--configs",
            "tiny",
            "--precisions",
            "fp32",
            "--batch",
            "4",
            "--length",
            "4",
            "--vocab-size",
            "64",
            "--steps",
            "1",
            "--repeats",
            "1",
            "--warmup",
            "1",
        ]
    )
    lines = capsys.readouterr().out.strip().splitlines()
    last = json.loads(lines[-1])
    row = last["tiny"]["fp32"]
    assert last["benchmark"] == "step_floor" and last["target"] == 1.2
    assert "tensorflow" in last["versions"] and "keras" in last["versions"]
    assert row["floor_ms"] > 0 and row["ours_ms"] > 0
    # keras-hub is a dependency of the package: its row is always there.
    assert "keras_hub" not in last["skipped_peers"]
    assert row["max_over_peer"] == pytest.approx(row["keras_hub_ms"] / row["floor_ms"], abs=1e-3)
    assert row["ours_over_peer"] == pytest.approx(row["keras_hub_ms"] / row["ours_ms"], abs=1e-3)
    assert row["room_for_target_ms"] == pytest.approx(
        row["keras_hub_ms"] / 1.2 - row["floor_ms"], abs=2e-3
    )
    assert any(line.startswith("| tiny | fp32 |") for line in lines)
