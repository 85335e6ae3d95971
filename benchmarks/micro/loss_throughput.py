"""The pre-softmax projection and label-smoothed loss of training: plain against fused.

Times forward + backward of `hidden @ E^T -> float32 logits -> label-smoothed cross-entropy`
(eps 0.1, summed over tokens) two ways, on the same random inputs:

- `plain`: what `TrainingModel` did before `fused_loss` (and still does under float16 and
  XLA): `Transformer`'s float32 logits, then `LabelSmoothedCrossEntropy`, autodiff;
- `fused`: `keras_transformer.training.fused_loss.fused_projection_loss`, one chunk of tokens
  at a time (`--chunks`: tokens per chunk; default: `chunk_tokens(V)`).

Both sides run in a `tf.function` (no XLA), in the compute dtype given by `--precision`
(float32, or bfloat16 inputs with float32 logits, as `mixed_bfloat16`), with TensorFlow's
default threads. Each row is the best of `--repeats` windows of `--steps` calls. The loss and
the gradients of the two sides are compared (largest relative difference). Prints a table and
last one JSON line.

Usage (from the repository root):
    python -m benchmarks.micro.loss_throughput                 # Multi30k dims, both precisions
    python -m benchmarks.micro.loss_throughput --tokens 1024 --vocab 8000 --d-model 256
"""

import argparse
import json

import numpy as np
import tensorflow as tf

from benchmarks.common import best_seconds, machine_line, machine_record
from keras_transformer.losses import LabelSmoothedCrossEntropy
from keras_transformer.training.fused_loss import chunk_tokens, fused_projection_loss

PRECISIONS = {"fp32": "float32", "bf16": "bfloat16"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tokens",
        type=int,
        default=4096,
        help="target tokens per call (default 4096: half a Multi30k update)",
    )
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=10000)
    parser.add_argument("--precision", choices=["fp32", "bf16", "both"], default="both")
    parser.add_argument(
        "--chunks",
        type=int,
        nargs="*",
        default=None,
        help="tokens per chunk of the fused rows (default: chunk_tokens(V))",
    )
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    return parser.parse_args(argv)


def make_inputs(tokens, d_model, vocab, seed=0):
    """Hidden states `[tokens/16, 16, d]`, an embedding matrix and labels with some padding."""
    rng = np.random.default_rng(seed)
    hidden = rng.normal(size=(tokens // 16, 16, d_model)).astype("float32")
    matrix = (rng.normal(size=(vocab, d_model)) * d_model**-0.5).astype("float32")
    labels = rng.integers(1, vocab, size=(tokens // 16, 16)).astype("int32")
    labels[::4, 12:] = 0  # pad tokens: no loss, no gradient
    return tf.constant(hidden), tf.Variable(matrix), tf.constant(labels)


def make_step(kind, dtype, labels, chunk=None):
    loss_fn = LabelSmoothedCrossEntropy(0.1)

    @tf.function
    def step(hidden, matrix):
        with tf.GradientTape() as tape:
            tape.watch(hidden)
            states, weights = tf.cast(hidden, dtype), tf.cast(matrix, dtype)
            if kind == "plain":
                logits = tf.cast(tf.matmul(states, weights, transpose_b=True), tf.float32)
                tokens = tf.reduce_sum(tf.cast(labels != 0, tf.float32))
                loss = loss_fn.call(labels, logits) * tokens
            else:
                loss = fused_projection_loss(states, weights, labels, 0.1, 0, chunk=chunk)
        return (loss,) + tuple(tape.gradient(loss, [hidden, matrix]))

    return step


def time_step(step, hidden, matrix, steps, repeats):
    """`(best seconds per call, the outputs as float64 arrays)`; the first call traces."""
    seconds = best_seconds(
        lambda: step(hidden, matrix), steps, repeats, wait=lambda outputs: outputs[-1].numpy()
    )
    return seconds, [np.asarray(x, dtype="float64") for x in step(hidden, matrix)]


def relative_difference(a, b):
    return float(max(np.abs(x - y).max() / max(np.abs(y).max(), 1e-30) for x, y in zip(a, b)))


def main(argv=None):
    args = parse_args(argv)
    hidden, matrix, labels = make_inputs(args.tokens, args.d_model, args.vocab)
    chunks = args.chunks or [chunk_tokens(args.vocab)]
    precisions = ["fp32", "bf16"] if args.precision == "both" else [args.precision]
    machine = machine_record()
    print(machine_line(machine) + "; default threads")
    print(f"tokens {args.tokens}, d_model {args.d_model}, V {args.vocab}")
    print("| precision | kind | chunk | ms (fwd+bwd) | tokens/s | x plain | max rel. diff |")
    print("|---|---|---:|---:|---:|---:|---:|")
    headline = {
        "benchmark": "loss_throughput",
        **machine,
        "tokens": args.tokens,
        "d_model": args.d_model,
        "vocab": args.vocab,
    }
    for precision in precisions:
        dtype = PRECISIONS[precision]
        plain, reference = time_step(
            make_step("plain", dtype, labels), hidden, matrix, args.steps, args.repeats
        )
        print(f"| {precision} | plain | | {plain * 1e3:.1f} | {args.tokens / plain:.0f} | 1.00 | |")
        rows = {}
        for chunk in chunks:
            seconds, outputs = time_step(
                make_step("fused", dtype, labels, chunk), hidden, matrix, args.steps, args.repeats
            )
            difference = relative_difference(outputs, reference)
            rows[chunk] = {
                "ms": round(seconds * 1e3, 2),
                "over_plain": round(plain / seconds, 3),
                "max_relative_difference": difference,
            }
            print(
                f"| {precision} | fused | {chunk} | {seconds * 1e3:.1f} | "
                f"{args.tokens / seconds:.0f} | {plain / seconds:.2f} | {difference:.1e} |"
            )
        best = min(rows, key=lambda chunk: rows[chunk]["ms"])
        headline[precision] = {
            "plain_ms": round(plain * 1e3, 2),
            "fused": rows,
            "best_chunk": best,
            "over_plain": rows[best]["over_plain"],
        }
    print(json.dumps(headline))
    return headline


if __name__ == "__main__":
    main()
