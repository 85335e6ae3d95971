"""One layer normalization of a training step, forward and backward: Keras's, ours, PyTorch's.

Times `LayerNormalization()(x)` and the gradients of `sum(y * w)` (a fixed random `w`) with
respect to `x`, gamma and beta, on one activation of a config's train step (`--configs`: the
Multi30k recipe's 8192 x 128, the parsing `--cpu` recipe's 2048 x 256, `train_throughput.py`'s
`small` 1024 x 256 and `base` 1024 x 512), in float32 and bfloat16 (the compute dtype of
`mixed_bfloat16`; gamma and beta stay float32, as under that policy):

- `identity`: the same function without the normalization (the floor);
- `keras`: `keras.layers.LayerNormalization` in a `tf.function` (no XLA): `moments` and
  autodiff;
- `ours`: `keras_transformer.layers.LayerNormalization` (the gradient in closed form);
- `torch`: `torch.nn.functional.layer_norm` with autograd, PyTorch's default threads. Skipped
  with one line when PyTorch is not installed.

Each row is the best of `--repeats` windows of `--steps` calls, the rows' windows taking
turns (`common.best_milliseconds`). Ours is also checked against Keras's on the
same input: the largest difference of the output and of each gradient, relative to the
largest magnitude of Keras's, goes in the JSON line (`max_relative_difference`). Prints a
table and last one JSON line.

Usage (from the repository root):
    python -m benchmarks.micro.layer_norm_throughput
    python -m benchmarks.micro.layer_norm_throughput --configs small --steps 20
"""

import argparse
import json

import keras
import numpy as np
import tensorflow as tf

from benchmarks.common import best_milliseconds, importable_peers, machine_line, machine_record
from keras_transformer.layers import LayerNormalization

PEER_MODULES = {"torch": "torch"}
# name -> (tokens, d_model): one activation of the config's batch.
SHAPES = {
    "multi30k": (8192, 128),  # configs/multi30k.yaml: 8192 tokens, d_model 128
    "parsing": (2048, 256),  # configs/ptb_wsj_gum_cpu.yaml: 2048 tokens, d_model 256
    "small": (32 * 32, 256),  # train_throughput.py: 32 x 32 tokens
    "base": (32 * 32, 512),
}
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
EPSILON = 1e-6


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--configs",
        nargs="*",
        choices=sorted(SHAPES),
        default=["multi30k", "parsing", "small", "base"],
    )
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    return parser.parse_args(argv)


def built_layer(cls, width, dtype, seed=0):
    """A built layer norm of `cls` with random gamma and beta (the same for the same seed)."""
    rng = np.random.default_rng(seed)
    layer = cls(epsilon=EPSILON, dtype=dtype)
    layer.build((None, width))
    layer.set_weights(
        [rng.normal(size=width).astype("float32") + 1, rng.normal(size=width).astype("float32")]
    )
    return layer


def keras_step(layer, weights):
    """`x -> [d/dx, d/dgamma, d/dbeta of sum(layer(x) * weights)], layer(x)` as a
    `tf.function`; `layer` None: the identity (gamma and beta get no gradient)."""

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = x if layer is None else layer(x, training=True)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * weights)
        sources = [x] if layer is None else [x, layer.gamma.value, layer.beta.value]
        return tape.gradient(loss, sources), y

    return step


def max_relative_difference(ours, theirs):
    """The largest |ours - theirs| over each pair of tensors, relative to max |theirs|."""
    worst = 0.0
    for a, b in zip(ours, theirs):
        a, b = (np.asarray(tf.cast(t, tf.float32)) for t in (a, b))
        worst = max(worst, float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)))
    return worst


def torch_call(shape, dtype, seed=0):
    """PyTorch's layer norm forward and backward on one tensor."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=generator).to(getattr(torch, dtype)).requires_grad_()
    gamma = torch.ones(shape[-1], requires_grad=True)
    beta = torch.zeros(shape[-1], requires_grad=True)
    weights = torch.randn(shape, generator=generator)

    def call():
        # Autocast's rule for layer_norm: float32 statistics and output, as Keras's.
        y = torch.nn.functional.layer_norm(x.float(), shape[-1:], gamma, beta, EPSILON)
        grads = torch.autograd.grad((y.to(x.dtype).float() * weights).sum(), [x, gamma, beta])
        return grads[0].float().numpy()

    return call


def main(argv=None):
    args = parse_args(argv)
    peers, skipped_peers = importable_peers(["torch"], PEER_MODULES)
    machine = machine_record(["tensorflow", "keras", *peers])
    print(
        machine_line(machine) + "; default threads; one layer normalization, forward and backward"
    )
    print("| config | activation | dtype | system | ms per call | x keras |")
    print("|---|---|---|---|---:|---:|")
    headline = {
        "benchmark": "layer_norm_throughput",
        **machine,
        "steps": args.steps,
        "repeats": args.repeats,
        "skipped_peers": skipped_peers,
    }
    for name in args.configs:
        tokens, d_model = SHAPES[name]
        shape = (tokens, d_model)
        headline[name] = {}
        for precision, dtype in DTYPES.items():
            rng = np.random.default_rng(0)
            x = tf.constant(rng.normal(size=shape) * 2 + 0.5, dtype)
            weights = tf.constant(rng.normal(size=shape), tf.float32)
            steps = {
                "identity": keras_step(None, weights),
                "keras": keras_step(
                    built_layer(keras.layers.LayerNormalization, d_model, dtype), weights
                ),
                "ours": keras_step(built_layer(LayerNormalization, d_model, dtype), weights),
            }
            calls = {kind: (lambda s=step, x=x: s(x)[0][0]) for kind, step in steps.items()}
            if "torch" in peers:
                calls["torch"] = torch_call(shape, dtype)
            ms = best_milliseconds(calls, args.steps, args.repeats, wait=np.asarray)
            (ours_grads, ours_y), (keras_grads, keras_y) = steps["ours"](x), steps["keras"](x)
            row = {kind: round(value, 3) for kind, value in ms.items()}
            row.update(
                ours_over_keras=round(ms["keras"] / ms["ours"], 3),
                max_relative_difference=max_relative_difference(
                    [ours_y, *ours_grads], [keras_y, *keras_grads]
                ),
            )
            for kind in ("identity", "keras", "ours", "torch"):
                if kind in row:
                    print(
                        f"| {name} | {tokens} x {d_model} | {precision} | {kind} | "
                        f"{row[kind]:.3f} | {ms['keras'] / row[kind]:.2f} |"
                    )
            headline[name][precision] = row
    print(json.dumps(headline))
    return headline


if __name__ == "__main__":
    main()
