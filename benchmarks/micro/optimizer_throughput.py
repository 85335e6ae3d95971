"""The Adam update of one training step: Keras's `Adam`, our `FusedAdam`, PyTorch's fused Adam.

Times one update of every trainable variable of a model config (the paper's Adam: 0.9, 0.98,
1e-9, constant learning rate 1e-3) from fixed random gradients:

- `keras`: `keras.optimizers.Adam.apply` in a `tf.function` (no XLA): a dozen element-wise
  ops per variable;
- `fused`: `keras_transformer.FusedAdam.apply`, the same function, one `ResourceApplyAdam`
  kernel per variable;
- `torch`: `torch.optim.Adam(fused=True)` (`foreach=True` where this PyTorch has no fused
  CPU Adam) on tensors of the same shapes: the update PyTorch's own maintainers recommend.
  Skipped with one line when PyTorch is not installed.

The variables are a `Transformer`'s at the config's dims (`--configs`: Multi30k's recipe,
`small` and `base` of `train_throughput.py`), float32, with TensorFlow's and PyTorch's
default threads. Each row is the best of `--repeats` windows of `--steps` updates. After the
timing, the two Keras sides run the same updates from the same start and their weights are
compared (largest relative difference). Prints a table and last one JSON line.

Usage (from the repository root):
    python -m benchmarks.micro.optimizer_throughput
    python -m benchmarks.micro.optimizer_throughput --configs base --steps 10
"""

import argparse
import json

import keras
import numpy as np
import tensorflow as tf

from benchmarks.common import best_seconds, importable_peers, machine_line, machine_record
from benchmarks.train_systems import CONFIGS as THROUGHPUT_CONFIGS
from keras_transformer import FusedAdam, TransformerConfig, build_model

PEER_MODULES = {"torch": "torch"}
# (layers, d_model, d_ff, heads, vocabulary): tiny, small and base as train_throughput.py's
# (vocabulary 8000, its default); multi30k as configs/multi30k.yaml.
CONFIGS = {name: dims + (8000,) for name, dims in THROUGHPUT_CONFIGS.items()}
CONFIGS["multi30k"] = (4, 128, 256, 4, 10000)
ADAM = dict(learning_rate=1e-3, beta_1=0.9, beta_2=0.98, epsilon=1e-9)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--configs", nargs="*", choices=sorted(CONFIGS), default=["multi30k", "small", "base"]
    )
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    return parser.parse_args(argv)


def model_variables(dims):
    layers, d_model, d_ff, heads, vocab = dims
    config = TransformerConfig(
        vocab_size=vocab,
        num_layers=layers,
        d_model=d_model,
        d_ff=d_ff,
        num_heads=heads,
        key_dim=d_model // heads,
        value_dim=d_model // heads,
    )
    keras.utils.set_random_seed(0)
    return build_model(config).trainable_variables


def keras_update(optimizer_class, variables, gradients):
    optimizer = optimizer_class(**ADAM)
    optimizer.build(variables)
    return tf.function(lambda: optimizer.apply(gradients, variables))


def torch_update(shapes, seed=0):
    """PyTorch's fastest Adam on tensors of `shapes`: `(its step, "fused" or "foreach")`."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(shape, generator=generator)) for shape in shapes]
    for param in params:
        param.grad = torch.randn(param.shape, generator=generator) * 1e-3
    options = dict(
        lr=ADAM["learning_rate"], betas=(ADAM["beta_1"], ADAM["beta_2"]), eps=ADAM["epsilon"]
    )
    try:
        optimizer, kind = torch.optim.Adam(params, fused=True, **options), "fused"
    except (RuntimeError, TypeError, ValueError):  # no fused CPU Adam in this PyTorch
        optimizer, kind = torch.optim.Adam(params, foreach=True, **options), "foreach"
    return optimizer.step, kind


def same_updates(variables, gradients, steps=3):
    """Largest relative difference between Keras's Adam and FusedAdam after `steps` updates
    from the same start."""
    start = [v.numpy() for v in variables]
    results = []
    for optimizer_class in (keras.optimizers.Adam, FusedAdam):
        for variable, value in zip(variables, start):
            variable.assign(value)
        update = keras_update(optimizer_class, variables, gradients)
        for _ in range(steps):
            update()
        results.append([v.numpy().astype("float64") for v in variables])
    for variable, value in zip(variables, start):
        variable.assign(value)
    return float(max(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30) for a, b in zip(*results)))


def main(argv=None):
    args = parse_args(argv)
    peers, skipped_peers = importable_peers(["torch"], PEER_MODULES)
    machine = machine_record(["tensorflow", "keras", *peers])
    print(
        machine_line(machine)
        + "; default threads; one Adam update of every trainable variable, float32"
    )
    print("| config | params | system | ms per update | x keras | max rel. diff |")
    print("|---|---:|---|---:|---:|---:|")
    headline = {
        "benchmark": "optimizer_throughput",
        **machine,
        "steps": args.steps,
        "repeats": args.repeats,
        "skipped_peers": skipped_peers,
    }
    for name in args.configs:
        variables = model_variables(CONFIGS[name])
        params = sum(int(np.prod(v.shape)) for v in variables)
        rng = np.random.default_rng(1)
        gradients = [tf.constant(rng.normal(size=v.shape) * 1e-3, tf.float32) for v in variables]
        difference = same_updates(variables, gradients)
        seconds = {
            kind: best_seconds(keras_update(cls, variables, gradients), args.steps, args.repeats)
            for kind, cls in (("keras", keras.optimizers.Adam), ("fused", FusedAdam))
        }

        row = {
            "params": params,
            "keras_ms": round(seconds["keras"] * 1e3, 2),
            "fused_ms": round(seconds["fused"] * 1e3, 2),
            "fused_over_keras": round(seconds["keras"] / seconds["fused"], 3),
            "max_relative_difference": difference,
        }
        print(f"| {name} | {params / 1e6:.2f}M | keras Adam | {row['keras_ms']:.1f} | 1.00 | |")
        print(
            f"| {name} | {params / 1e6:.2f}M | FusedAdam (ours) | {row['fused_ms']:.1f} | "
            f"{row['fused_over_keras']:.2f} | {difference:.1e} |"
        )
        if "torch" in peers:
            step, kind = torch_update([tuple(v.shape) for v in variables])
            torch_seconds = best_seconds(step, args.steps, args.repeats)
            row.update(
                torch_ms=round(torch_seconds * 1e3, 2),
                torch_kind=kind,
                fused_over_torch=round(torch_seconds / seconds["fused"], 3),
            )
            print(
                f"| {name} | {params / 1e6:.2f}M | torch Adam ({kind}) | "
                f"{row['torch_ms']:.1f} | {seconds['keras'] / torch_seconds:.2f} | |"
            )
        headline[name] = row
    print(json.dumps(headline))
    return headline


if __name__ == "__main__":
    main()
