"""The matmul floor of a train step: how fast any step of these dims could be on this machine.

For each config and precision, times the matrix products of one training step alone (every
forward product of the Transformer and its output layer, and the two backward products of each:
the input's and the weight's gradient), back to back in one `tf.function`, with no other work.
Every system that trains with TensorFlow's kernels (ours, keras-hub) runs these same products,
so this time is a floor under each side's step. Beside it, the step of ours and of keras-hub
(XLA off, their best mode on CPU in `train_throughput.py`'s records), measured by
`train_throughput.py`'s own rows (same batch, dims, dropout, loss, Adam; a process per row).

What it answers: the most that ours could be over keras-hub is keras-hub's step over the floor
(ours at zero cost beyond its products), and a target ratio R needs our work beyond the products
to fit in `peer step / R - floor`. The table gives both, and each side's time beyond its products.

Products per step (T = batch x length tokens per side; a product M x K by K x N is "M,K,N"):
encoder layer: Q, K, V, O (T,d,d) x 4, feed-forward (T,d,f) and (T,f,d), attention scores and
weighted sums (batch x heads products of (L,d/h,L) and (L,L,d/h)); decoder layer: self Q, K, V,
O and cross Q, O (T,d,d) x 6, cross K, V on the encoder output (T,d,d) x 2, feed-forward, and
two attentions; output layer (T,d,V). The backward products of each are the ones TensorFlow's
`MatMul` gradient runs: the input's `dY @ W^T` (`transpose_b`) and the weight's `X^T @ dY`
(`transpose_a`), which oneDNN runs up to a quarter slower than a plain product of the same
shape on this CPU; both operands of the attention products get a gradient the same way.

Command (from the repository root, on an idle machine; about 6 minutes for the defaults on a
2-core EPYC):
    python -m benchmarks.step_floor
    python -m benchmarks.step_floor --configs multi30k --batch 512 --length 16 \\
        --vocab-size 10000 --precisions bf16
Prints a table and, last, one JSON line: `{"CONFIG": {"fp32": {"floor_ms": F,
"floor_gflops": G, "ours_ms": O, "keras_hub_ms": K, "max_over_peer": K / F,
"room_for_target_ms": K / R - F, "ours_over_peer": K / O}, ...}}`. The floor's GFLOP/s should
be near the measured matmul peak (`train_throughput.py`'s header); above it would mean products
were merged or skipped, and the floor is wrong. keras-hub not installed: its columns are empty
and it is listed under "skipped_peers".
"""

import argparse
import json
import os
import sys

from benchmarks.common import (
    best_seconds,
    importable_peers,
    in_child,
    machine_line,
    machine_record,
    print_result,
)
from benchmarks.train_systems import CONFIGS, PEER_MODULES

FORMS = ("forward", "input_grad", "weight_grad")


def step_products(num_layers, d_model, d_ff, heads, vocab_size, batch, length):
    """`[(count, batch_dims, M, K, N, form)]`: every forward product M,K,N of one step, and its
    two backward products (`form`: "forward", "input_grad" or "weight_grad"; the module
    docstring)."""
    tokens, d, f, dk = batch * length, d_model, d_ff, d_model // heads
    bh = batch * heads
    forward = [
        (num_layers * (4 + 6 + 2), 1, tokens, d, d),  # encoder 4, decoder 6 + cross K, V
        (num_layers * 2, 1, tokens, d, f),  # feed-forward in, both stacks
        (num_layers * 2, 1, tokens, f, d),  # feed-forward out
        (num_layers * 3, bh, length, dk, length),  # attention scores: enc, self, cross
        (num_layers * 3, bh, length, length, dk),  # weighted sums
        (1, 1, tokens, d, vocab_size),  # output layer
    ]
    return [(*shape, form) for shape in forward for form in FORMS]


def time_floor(products, dtype, threads, steps, repeats):
    """Seconds per step of `products` run back to back in one `tf.function` (best window)."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    # Each product gets operands of its own: TensorFlow merges repeated products of the same
    # tensors into one (common subexpression elimination when it optimizes a function's
    # graph), and a step's products all differ anyway.
    operands = []
    for count, b, m, k, n, form in products:
        # (shape of a, shape of b, transpose_a, transpose_b): Y = X W, dX = dY W^T, dW = X^T dY
        a, b_, ta, tb = {
            "forward": ((m, k), (k, n), False, False),
            "input_grad": ((m, n), (k, n), False, True),
            "weight_grad": ((m, k), (m, n), True, False),
        }[form]
        lead = (b,) if b > 1 else ()
        for _ in range(count):
            operands.append(
                (
                    tf.cast(tf.random.normal(lead + a), dtype),
                    tf.cast(tf.random.normal(lead + b_), dtype),
                    ta,
                    tb,
                )
            )

    @tf.function
    def step():
        corners = [
            tf.reshape(tf.matmul(a, b, transpose_a=ta, transpose_b=tb), [-1])[0]
            for a, b, ta, tb in operands
        ]
        return tf.add_n(corners)

    # The first call traces; `float` waits for each step's result.
    return best_seconds(lambda: float(step()), steps, repeats)


def product_flops(products):
    return sum(2 * count * b * m * k * n for count, b, m, k, n, _ in products)


def worker(spec):
    seconds = time_floor(
        [tuple(p) for p in spec["products"]],
        spec["dtype"],
        spec["threads"],
        spec["steps"],
        spec["repeats"],
    )
    print_result({"seconds": seconds})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=["small", "base"], choices=list(CONFIGS))
    parser.add_argument(
        "--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"]
    )
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument(
        "--target", type=float, default=1.2, help="the ratio over the peer whose room is reported"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(json.loads(args.worker))

    present, skipped = importable_peers(["keras_hub"], PEER_MODULES)
    systems = ["ours", *present]
    results, lines = {}, []
    for name in args.configs:
        dims = CONFIGS[name]
        products = step_products(*dims, args.vocab_size, args.batch, args.length)
        results[name] = {}
        for precision in args.precisions:
            dtype = {"fp32": "float32", "bf16": "bfloat16"}[precision]
            floor = in_child(
                "benchmarks.step_floor",
                {
                    "products": products,
                    "dtype": dtype,
                    "threads": args.threads,
                    "steps": args.steps,
                    "repeats": args.repeats,
                },
                timeout=1800,
            )
            row = {"floor_ms": floor.get("seconds") and round(1000 * floor["seconds"], 3)}
            if row["floor_ms"]:
                row["floor_gflops"] = round(product_flops(products) / floor["seconds"] / 1e9, 1)
            if "error" in floor:
                print(f"# {name} {precision} floor: failed, {floor['error']}", file=sys.stderr)
            for system in systems:
                spec = {
                    "kind": "row",
                    "system": system,
                    "mode": "xla_off",
                    "backend": "tensorflow",
                    "precision": precision,
                    "dims": dims,
                    "batch": args.batch,
                    "length": args.length,
                    "vocab_size": args.vocab_size,
                    "steps": args.steps,
                    "repeats": args.repeats,
                    "warmup": args.warmup,
                    "threads": args.threads,
                    "attention_dropout": 0.0,
                }
                result = in_child("benchmarks.train_throughput", spec, timeout=1800)
                if "error" in result:
                    print(
                        f"# {name} {precision} {system}: failed, {result['error']}", file=sys.stderr
                    )
                    row[f"{system}_ms"] = None
                else:
                    row[f"{system}_ms"] = round(1000 * result["seconds"] / args.steps, 3)
                print(
                    f"# {name} {precision} {system}: {row[f'{system}_ms']} ms "
                    f"(floor {row['floor_ms']} ms)",
                    file=sys.stderr,
                    flush=True,
                )
            floor_ms, ours_ms, peer_ms = (row["floor_ms"], row["ours_ms"], row.get("keras_hub_ms"))
            if floor_ms and peer_ms:
                row["max_over_peer"] = round(peer_ms / floor_ms, 3)
                row["room_for_target_ms"] = round(peer_ms / args.target - floor_ms, 3)
            if ours_ms and peer_ms:
                row["ours_over_peer"] = round(peer_ms / ours_ms, 3)
            results[name][precision] = row
            lines.append((name, precision, row))

    machine = machine_record(["tensorflow", "keras", *present])
    print(machine_line(machine, args.threads))
    print(
        f"batch {args.batch} x {args.length} tokens a side, vocab {args.vocab_size}; best of "
        f"{args.repeats} x {args.steps} steps\n"
    )
    print(
        f"| config | precision | floor ms (GFLOP/s) | ours ms (beyond floor) | "
        f"keras-hub ms (beyond floor) | ours x keras-hub | "
        f"keras-hub / floor (most ours could be) | "
        f"ours beyond floor for {args.target:g}x |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")

    def cell(value, extra=None):
        if value is None:
            return "-"
        return f"{value:.1f}" + ("" if extra is None else f" ({value - extra:.1f})")

    for name, precision, row in lines:
        floor_ms = row["floor_ms"]
        print(
            f"| {name} | {precision} | {cell(floor_ms)} ({row.get('floor_gflops', '-')}) | "
            f"{cell(row['ours_ms'], floor_ms)} "
            f"| {cell(row.get('keras_hub_ms'), floor_ms)} | "
            f"{row.get('ours_over_peer', '-')} | {row.get('max_over_peer', '-')} | "
            f"{cell(row.get('room_for_target_ms'))} |"
        )
    print(
        json.dumps(
            {
                "benchmark": "step_floor",
                **machine,
                "threads": args.threads,
                "batch": args.batch,
                "length": args.length,
                "vocab_size": args.vocab_size,
                "target": args.target,
                **results,
                "skipped_peers": skipped,
            }
        )
    )


if __name__ == "__main__":
    main()
