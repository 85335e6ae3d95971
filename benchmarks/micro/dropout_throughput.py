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
turns. Ours is also checked: the kept
fraction of its last mask must be within 5 standard deviations of `1 - rate`. Prints a table
and last one JSON line.

Usage:
    python benchmarks/dropout_throughput.py
    python benchmarks/dropout_throughput.py --configs small --steps 20
"""

import argparse
import json
import os
import pathlib
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from machine import cpu_description  # noqa: E402  (benchmarks/machine.py)

from keras_transformer.layers import Dropout  # noqa: E402

# name -> (tokens, d_model, rate): one activation of the config's batch.
SHAPES = {
    "multi30k": (8192, 128, 0.3),  # pipelines/multi30k.py: 8192 tokens, dropout 0.3
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


def best_milliseconds(calls, steps, repeats):
    """`{name: best ms per call}`: the windows of the calls take turns (a machine that slows
    down or speeds up during the run affects every row alike), after `steps` warm-up calls
    each (tracing, allocation)."""

    def window(call):
        started = time.perf_counter()
        for _ in range(steps):
            out = call()
        np.asarray(out)  # wait for the last result
        return (time.perf_counter() - started) / steps * 1e3

    for call in calls.values():
        window(call)
    best = {name: float("inf") for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            best[name] = min(best[name], window(call))
    return best


def kept_fraction_is_plausible(mask_output, rate):
    """Whether the nonzero fraction of a dropout output of a nonzero input is within 5
    standard deviations of `1 - rate`."""
    kept = np.asarray(tf.cast(mask_output, tf.float32)) != 0
    return bool(abs(kept.mean() - (1 - rate)) < 5 * np.sqrt(rate * (1 - rate) / kept.size))


def torch_call(shape, rate, dtype, seed=0):
    """PyTorch's dropout forward and backward on one tensor, or None without PyTorch."""
    try:
        import torch
    except ImportError:
        return None
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=generator).to(getattr(torch, dtype)).requires_grad_()

    def call():
        y = torch.nn.functional.dropout(x, rate, training=True)
        (grad,) = torch.autograd.grad(y.float().square().sum(), x)
        return grad.float().numpy()

    return call, torch.__version__


def main(argv=None):
    args = parse_args(argv)
    cpu, flags = cpu_description()
    print(
        f"{cpu} ({' '.join(flags)}), TensorFlow {tf.__version__}, Keras {keras.__version__}, "
        "default threads; one dropout, forward and backward"
    )
    print("| config | activation | dtype | system | ms per call | x keras |")
    print("|---|---|---|---|---:|---:|")
    headline = {
        "benchmark": "dropout_throughput",
        "cpu": cpu,
        "cpu_flags": flags,
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "steps": args.steps,
        "repeats": args.repeats,
        "skipped_peers": {},
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
            peer = torch_call(shape, rate, dtype)
            if peer is None:
                headline["skipped_peers"]["torch"] = "PyTorch is not installed"
            else:
                calls["torch"] = peer[0]
                headline["torch_version"] = peer[1]
            ms = best_milliseconds(calls, args.steps, args.repeats)
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
    if "torch" in headline["skipped_peers"]:
        print("torch: skipped (PyTorch is not installed)")
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
