"""One dropout of a training step, forward and backward: Keras's `Dropout`, ours, PyTorch's.

Times `Dropout(rate)(x, training=True)` and the gradient of a sum of its squares with respect
to `x` (what training pays: the forward mask and the backward multiply), on one activation of
a config's train step (`--configs`: the Multi30k recipe's 8192 x 128, `train_throughput.py`'s
`small` 1024 x 256 and `base` 1024 x 512), in float32 and bfloat16 (the compute dtype of
`mixed_bfloat16`):

- `identity`: the same function without dropout (the floor: the loss and its gradient);
- `keras`: `keras.layers.Dropout` in a `tf.function` (no XLA);
- `ours`: `keras_transformer.layers.Dropout` (float32 uniforms and a mask multiply for
  bfloat16; Keras's own for float32);
- `torch`: `torch.nn.functional.dropout` with autograd, PyTorch's default threads. Skipped with
  one line when PyTorch is not installed.

Each row is the best of `--repeats` windows of `--steps` calls, the rows' windows taking
turns (`common.best_seconds_each`). Ours is also checked: the kept fraction of its last mask
must be within 5 standard deviations of `1 - rate`. Prints a table and last one JSON line.

Usage (from the repository root):
    python -m benchmarks.micro.dropout_throughput
    python -m benchmarks.micro.dropout_throughput --configs small --steps 20
"""

import argparse
import json

import keras
import numpy as np
import tensorflow as tf

from benchmarks.common import best_milliseconds, importable_peers, machine_line, machine_record
from keras_transformer.layers import Dropout

PEER_MODULES = {"torch": "torch"}
# name -> (tokens, d_model, rate): one activation of the config's batch.
SHAPES = {
    "multi30k": (8192, 128, 0.3),  # configs/multi30k.yaml: 8192 tokens, dropout 0.3
    "small": (32 * 32, 256, 0.1),  # train_throughput.py: 32 x 32 tokens, dropout 0.1
    "base": (32 * 32, 512, 0.1),
}
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--configs", nargs="*", choices=sorted(SHAPES), default=["multi30k", "small", "base"]
    )
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    return parser.parse_args(argv)


def keras_step(layer):
    """`x -> (d sum(layer(x)^2) / dx, layer(x))` as a `tf.function`; None: the identity."""

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = x if layer is None else layer(x, training=True)
            loss = tf.reduce_sum(tf.square(tf.cast(y, tf.float32)))
        return tape.gradient(loss, x), y

    return step


def kept_fraction_is_plausible(mask_output, rate):
    """Whether the nonzero fraction of a dropout output of a nonzero input is within 5
    standard deviations of `1 - rate`."""
    kept = np.asarray(tf.cast(mask_output, tf.float32)) != 0
    return bool(abs(kept.mean() - (1 - rate)) < 5 * np.sqrt(rate * (1 - rate) / kept.size))


def torch_call(shape, rate, dtype, seed=0):
    """PyTorch's dropout forward and backward on one tensor."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=generator).to(getattr(torch, dtype)).requires_grad_()

    def call():
        y = torch.nn.functional.dropout(x, rate, training=True)
        (grad,) = torch.autograd.grad(y.float().square().sum(), x)
        return grad.float().numpy()

    return call


def main(argv=None):
    args = parse_args(argv)
    peers, skipped_peers = importable_peers(["torch"], PEER_MODULES)
    machine = machine_record(["tensorflow", "keras", *peers])
    print(machine_line(machine) + "; default threads; one dropout, forward and backward")
    print("| config | activation | dtype | system | ms per call | x keras |")
    print("|---|---|---|---|---:|---:|")
    headline = {
        "benchmark": "dropout_throughput",
        **machine,
        "steps": args.steps,
        "repeats": args.repeats,
        "skipped_peers": skipped_peers,
    }
    for name in args.configs:
        tokens, d_model, rate = SHAPES[name]
        shape = (tokens, d_model)
        headline[name] = {}
        for precision, dtype in DTYPES.items():
            rng = np.random.default_rng(0)
            # Nonzero everywhere, so that a zero in the output is a dropped unit.
            x = tf.constant(np.abs(rng.normal(size=shape)) + 0.1, dtype)
            ours_layer = Dropout(rate, seed=1, dtype=dtype)
            steps = {
                "identity": keras_step(None),
                "keras": keras_step(keras.layers.Dropout(rate, seed=1, dtype=dtype)),
                "ours": keras_step(ours_layer),
            }
            calls = {kind: (lambda s=step, x=x: s(x)[0]) for kind, step in steps.items()}
            if "torch" in peers:
                calls["torch"] = torch_call(shape, rate, dtype)
            ms = best_milliseconds(calls, args.steps, args.repeats, wait=np.asarray)
            plausible = kept_fraction_is_plausible(steps["ours"](x)[1], rate)
            row = {kind: round(value, 3) for kind, value in ms.items()}
            row.update(
                ours_over_keras=round(ms["keras"] / ms["ours"], 3),
                ours_kept_fraction_plausible=plausible,
            )
            for kind in ("identity", "keras", "ours", "torch"):
                if kind in row:
                    print(
                        f"| {name} | {tokens} x {d_model} | {precision} | {kind} | "
                        f"{row[kind]:.3f} | {ms['keras'] / row[kind]:.2f} |"
                    )
            headline[name][precision] = row
    for name in args.configs:
        for precision, row in headline[name].items():
            if not row["ours_kept_fraction_plausible"]:
                print(
                    f"ours at {name} {precision}: the kept fraction is not 1 - rate, so its "
                    "row times a broken dropout"
                )
    print(json.dumps(headline))
    return headline


if __name__ == "__main__":
    main()
