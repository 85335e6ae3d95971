"""Train-step throughput (target tokens/s) and MFU: ours against two peers doing the same work.

For each config (tiny, small, base) and one fixed batch (B sentences of L source and L target
tokens, vocabulary V), times full training steps (forward, label-smoothed loss, backward, Adam
update) of three systems, each configured to do the work of our default train step:

- ours: `keras_transformer.training.TrainingModel` (the token-exact train step of `train()`)
  under `model.fit`, default `TransformerConfig` apart from the dims: post-norm, dropout 0.1
  on the embedding + positional-encoding sums and on every sub-layer output, none on the
  attention probabilities or after the ReLU, one embedding matrix for source, target and the
  output projection (no output bias), sinusoidal positions, label smoothing 0.1, Adam (0.9,
  0.98, 1e-9) on the Noam schedule (`build_optimizer`: our `FusedAdam`, one fused
  TensorFlow kernel per variable), float32 logits and loss.
- keras-hub: `TransformerEncoder`/`TransformerDecoder` stacks (post-norm, `dropout=0.1` on
  their sub-layer outputs) between one `ReversibleEmbedding` used for source, target and,
  reversed, the output projection (tied, no bias), scaled by sqrt(d_model), plus
  `SinePositionEncoding` and a dropout 0.1; the dropout that keras-hub applies with the same
  rate to the attention probabilities is set to `--attention-dropout` (0: ours has none) on
  each attention layer; the same `LabelSmoothedCrossEntropy(0.1)`, Keras's own Adam with
  the same hyper-parameters and schedule (`keras.optimizers.Adam(NoamSchedule(d_model),
  0.9, 0.98, 1e-9)`: the Adam a keras-hub user has, as Keras has no fused one),
  and a float32 cast of the logits.
- torch: `nn.TransformerEncoderLayer`/`nn.TransformerDecoderLayer` stacks (`norm_first=False`,
  no final stack LayerNorm: `nn.Transformer` adds one, ours has none), dropout 0.1 on
  sub-layer outputs, the feed-forward's inner dropout replaced by `nn.Identity` (ours has
  none), `MultiheadAttention.dropout` = `--attention-dropout`; one `nn.Embedding` for source,
  target and output (`F.linear` with its weight: tied, no bias), sqrt(d_model) scale,
  sinusoids, dropout 0.1; a float causal mask with `tgt_is_causal=True`;
  `CrossEntropyLoss(label_smoothing=0.1, ignore_index=0)` on float32 logits; Adam (0.9, 0.98,
  1e-9, fused where this PyTorch has it) on the Noam schedule (`LambdaLR`).

Padding: the batch has none (every sentence is L tokens on every side), so the peers get no
key-padding masks (in PyTorch, boolean key-padding masks merge into per-head float masks and
take attention off its fused causal kernel). Ours always builds its padding mask from the
ids (part of our model; a cost to ours only).

Modes and precisions: ours and keras-hub with XLA forced off and on (`jit_compile=False` /
`True`), PyTorch eager and `torch.compile`; each in fp32 and bf16 (Keras `mixed_bfloat16`,
PyTorch `autocast(bfloat16)`; float32 weights, Adam and loss on every side). Rows are compared
only within one precision. Headline per config and precision: our best row over the best peer
row, and the matched ratios: ours XLA off over keras-hub XLA off and over PyTorch eager (no
compiler on either side), ours XLA on over keras-hub XLA on and over `torch.compile` (both
compiled).

MFU = model FLOPs/s / the measured matmul peak of the same precision (the best of
TensorFlow's and PyTorch's rate on 2048x2048 products). Model FLOPs = 3 x the forward matmul
and attention FLOPs at these dims (one formula for all systems; embedding lookups excluded).

Each row runs in its own Python process (no thread pools, compiled graphs or dtype policies
shared between rows; a crash is one failed row) and is the best of `--repeats` windows of
`--steps` steps after a warm-up (compilation) window. A peer that is not installed is
skipped with one line and listed under "skipped_peers"; a row that fails (e.g. no C++
compiler for `torch.compile`) or runs past `--row-timeout` prints one line, shows "failed"
and is listed under "failed_rows". The bf16 rows of a framework whose bfloat16 matmul is
under a quarter of its float32 rate here (PyTorch on a CPU without AVX512-BF16: under
1 GFLOP/s, a base step would take many minutes) are skipped with one line and listed under
"skipped_rows", unless `--run-slow-bf16`. Prints the table, the headline lines, and last one
JSON line.

On a GPU (`--backend jax`): the model FLOPs are the same; ours and keras-hub run under
`KERAS_BACKEND=jax` (no TensorFlow needed: `model.fit` on NumPy arrays; ours is the plain
`Transformer` compiled with the same `LabelSmoothedCrossEntropy` loss, since `TrainingModel`'s
token-exact micro-batch step is TensorFlow-only and, with one micro-batch, computes the same
update), where Keras always compiles the step with XLA: their only mode is `xla_on`. PyTorch
runs on CUDA (autocast bf16 on "cuda"). fp32 is IEEE float32 on every side (JAX's
`jax_default_matmul_precision="highest"`, PyTorch's default `allow_tf32=False`): no TF32.
The peak is the best of JAX's and PyTorch's 8192 x 8192 product on the GPU. The same table
and JSON line, with the GPU named in "device".

Usage (from the repository root):
    python -m benchmarks.train_throughput [--configs tiny small base] [--precisions fp32 bf16]
        [--modes xla_off xla_on eager compile] [--peers keras_hub torch] [--batch 32]
        [--length 32] [--vocab-size 8000] [--steps 5] [--repeats 3] [--warmup 3]
        [--attention-dropout 0] [--row-timeout 1800] [--run-slow-bf16]
        [--backend tensorflow|jax]
    python -m benchmarks.train_throughput --backend jax --configs base big \
        --batch 256 --length 64 --vocab-size 32000 --steps 10   # one GPU
"""

import argparse
import json
import os
import sys

from benchmarks.common import (
    importable_peers,
    in_child,
    machine_line,
    machine_record,
    print_result,
    speed_ratios,
)
from benchmarks.matmul_peaks import (
    gpu_matmul_peaks,
    matmul_peaks,
    slow_bf16,
    training_flops,
)
from benchmarks.train_systems import (
    CONFIGS,
    DROPOUT,
    LABEL_SMOOTHING,
    PEER_MODULES,
    make_batch,
    run_keras_hub,
    run_ours,
    run_torch,
)

MODULE = "benchmarks.train_throughput"  # what a row's child process runs
SYSTEM_MODES = {
    "ours": ("xla_off", "xla_on"),
    "keras_hub": ("xla_off", "xla_on"),
    "torch": ("eager", "compile"),
}
# (peer, peer mode, our mode): no compiler on either side, or a compiler on both.
MATCHED = [
    ("keras_hub", "xla_off", "xla_off"),
    ("keras_hub", "xla_on", "xla_on"),
    ("torch", "eager", "xla_off"),
    ("torch", "compile", "xla_on"),
]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--configs", nargs="+", default=["tiny", "small", "base"], choices=list(CONFIGS)
    )
    parser.add_argument(
        "--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"]
    )
    parser.add_argument(
        "--modes",
        nargs="+",
        default=["xla_off", "xla_on", "eager", "compile"],
        choices=["xla_off", "xla_on", "eager", "compile"],
        help="xla_off/xla_on for ours and keras-hub, eager/compile for torch",
    )
    parser.add_argument(
        "--peers", nargs="+", default=["keras_hub", "torch"], choices=["keras_hub", "torch"]
    )
    parser.add_argument("--batch", type=int, default=32, help="sentences per batch")
    parser.add_argument("--length", type=int, default=32, help="source and target length")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--steps", type=int, default=5, help="steps per timed window")
    parser.add_argument("--repeats", type=int, default=3, help="timed windows (best kept)")
    parser.add_argument(
        "--warmup",
        type=int,
        default=3,
        help="untimed steps first (XLA and torch.compile compile in them)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count(),
        help="CPU threads for TensorFlow and PyTorch alike",
    )
    parser.add_argument(
        "--attention-dropout",
        type=float,
        default=0.0,
        help="dropout on the attention probabilities, on every side (ours: 0)",
    )
    parser.add_argument(
        "--run-slow-bf16",
        action="store_true",
        help="run bf16 rows even of a framework without fast bf16 matmuls here",
    )
    parser.add_argument(
        "--row-timeout",
        type=float,
        default=1800,
        help="seconds after which a row is stopped and marked failed",
    )
    parser.add_argument(
        "--backend",
        choices=["tensorflow", "jax"],
        default="tensorflow",
        help="jax: ours and keras-hub under KERAS_BACKEND=jax, PyTorch on "
        "CUDA where there is a GPU (the module docstring)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # one row, in a child process
    return parser.parse_args(argv)


# -- FLOPs, peak, machine ----------------------------------------------------------------------


# -- data --------------------------------------------------------------------------------------


# -- Keras systems -----------------------------------------------------------------------------


# -- PyTorch -----------------------------------------------------------------------------------


# -- one row per child process -----------------------------------------------------------------


def worker(spec):
    """Runs one measurement (`spec["kind"]`: a row, or the peaks) and prints its JSON."""
    try:
        if spec["kind"] == "peaks" and spec["backend"] == "jax":
            peaks, device = gpu_matmul_peaks(spec["precisions"], spec["use_torch"])
            result = {"peaks": peaks, "device": device}
        elif spec["kind"] == "peaks":
            result = {"peaks": matmul_peaks(spec["precisions"], spec["threads"], spec["use_torch"])}
        else:
            if spec["system"] != "torch" and spec["backend"] == "jax":
                if spec["precision"] == "fp32":  # IEEE float32 matmuls, as PyTorch's default
                    import jax

                    jax.config.update("jax_default_matmul_precision", "highest")
            elif spec["system"] != "torch":
                import tensorflow as tf

                tf.config.threading.set_intra_op_parallelism_threads(spec["threads"])
            data = make_batch(spec["batch"], spec["length"], spec["vocab_size"])
            run = {"ours": run_ours, "keras_hub": run_keras_hub, "torch": run_torch}
            seconds, params, compiled = run[spec["system"]](spec, data)
            result = {"seconds": seconds, "params": params, "compiled": compiled}
    except Exception as error:  # one line for the parent; the row is marked failed
        message = str(error).strip().splitlines()
        result = {"error": f"{type(error).__name__}: {message[0] if message else ''}"[:300]}
    print_result(result)


# -- the run -----------------------------------------------------------------------------------


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return worker(json.loads(args.worker))
    modes = list(args.modes)
    if args.backend == "jax":
        os.environ["KERAS_BACKEND"] = "jax"  # read by Keras at import, here and in each row
        # One process at a time holds the GPU, but the parent imports keras-hub (and so JAX)
        # too: no process takes 75% of the GPU's memory up front.
        os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
        if "xla_off" in modes:  # Keras on JAX always compiles train steps with XLA
            modes.remove("xla_off")
            print(
                "# no xla_off rows on JAX: Keras compiles every train step there", file=sys.stderr
            )
    present, skipped_peers = importable_peers(args.peers, PEER_MODULES)
    systems = ["ours", *present]
    peaks = in_child(
        MODULE,
        {
            "kind": "peaks",
            "precisions": args.precisions,
            "backend": args.backend,
            "threads": args.threads,
            "use_torch": "torch" in present,
        },
    )
    if "error" in peaks:
        print(f"# matmul peak not measured: {peaks['error']} (MFU left out)", file=sys.stderr)
        peak = {}
    else:
        peak = {p: max(rates.values()) for p, rates in peaks["peaks"].items()}
    tokens_per_step = args.batch * args.length
    # The pairs this run asked for (a skipped peer's stay, as null: never read as a win).
    matched = [
        (peer, peer_mode, our_mode)
        for peer, peer_mode, our_mode in MATCHED
        if peer in args.peers and peer_mode in modes and our_mode in modes
    ]
    slow = {}  # system -> why its bf16 rows are not run
    if "bf16" in args.precisions and "peaks" in peaks and not args.run_slow_bf16:
        for system in systems:
            framework = "torch" if system == "torch" else args.backend
            reason = slow_bf16(peaks["peaks"], framework)
            if reason:
                slow[system] = reason
                print(
                    f"# skipping the bf16 rows of {system}: {reason}", file=sys.stderr, flush=True
                )
    rows, failed, skipped_rows, headline = [], {}, {}, {}
    for name in args.configs:
        dims = CONFIGS[name]
        flops = training_flops(*dims[:3], args.vocab_size, args.batch, args.length)
        headline[name] = {}
        for precision in args.precisions:
            precision_rows = []
            for system in systems:
                for mode in SYSTEM_MODES[system]:
                    if mode not in modes:
                        continue
                    spec = {
                        "kind": "row",
                        "system": system,
                        "mode": mode,
                        "backend": args.backend,
                        "precision": precision,
                        "dims": dims,
                        "batch": args.batch,
                        "length": args.length,
                        "vocab_size": args.vocab_size,
                        "steps": args.steps,
                        "repeats": args.repeats,
                        "warmup": args.warmup,
                        "threads": args.threads,
                        "attention_dropout": args.attention_dropout,
                    }
                    row = {
                        "config": name,
                        "precision": precision,
                        "system": system,
                        "mode": mode,
                        "params": None,
                        "step_s": None,
                        "tokens_per_s": None,
                        "mfu": None,
                        "status": "ok",
                    }
                    label = f"{name} {precision} {system} {mode}"
                    if precision == "bf16" and system in slow:
                        skipped_rows[label] = slow[system]
                        row["status"] = "skipped"
                        precision_rows.append(row)
                        continue
                    result = in_child(MODULE, spec, timeout=args.row_timeout)
                    if "error" in result:
                        failed[label] = result["error"]
                        row["status"] = "failed"
                        print(f"# {label}: failed, {result['error']}", file=sys.stderr, flush=True)
                    else:
                        step_s = result["seconds"] / args.steps
                        row.update(
                            params=result["params"],
                            step_s=step_s,
                            tokens_per_s=tokens_per_step / step_s,
                        )
                        if precision in peak:
                            row["mfu"] = flops / step_s / peak[precision]
                        # The whole row, so that a run stopped before its table keeps it.
                        mfu = "" if row["mfu"] is None else f", MFU {100 * row['mfu']:.1f}%"
                        print(
                            f"# {label}: {row['tokens_per_s']:.0f} tokens/s, step "
                            f"{1000 * step_s:.1f} ms{mfu}",
                            file=sys.stderr,
                            flush=True,
                        )
                    precision_rows.append(row)
            ratios = speed_ratios(precision_rows, matched)
            best = max(
                (
                    r
                    for r in precision_rows
                    if r["system"] == "ours" and r["tokens_per_s"] is not None
                ),
                key=lambda r: r["tokens_per_s"],
                default=None,
            )
            ratios["ours_tokens_per_s"] = best and round(best["tokens_per_s"], 1)
            ratios["mfu"] = round(best["mfu"], 4) if best and best["mfu"] is not None else None
            headline[name][precision] = ratios
            best_peer_rate = max(
                (
                    r["tokens_per_s"]
                    for r in precision_rows
                    if r["system"] != "ours" and r["tokens_per_s"]
                ),
                default=None,
            )
            for row in precision_rows:
                row["x_best_peer"] = (
                    row["tokens_per_s"] / best_peer_rate
                    if row["tokens_per_s"] and best_peer_rate
                    else None
                )
            rows.extend(precision_rows)

    machine = machine_record(["tensorflow", "jax", "keras", *present])
    print(machine_line(machine, args.threads))
    device = peaks.get("device")
    if device:
        print(f"device: {device} (backend {args.backend})")
    if peak:
        print(
            "matmul peak: "
            + "; ".join(
                f"{p} " + ", ".join(f"{k} {v / 1e9:.1f}" for k, v in rates.items()) + " GFLOP/s"
                for p, rates in peaks["peaks"].items()
            )
        )
    print(
        f"batch {args.batch} x {args.length} source + {args.length} target tokens (no "
        f"padding), vocab {args.vocab_size}, dropout {DROPOUT} (attention "
        f"{args.attention_dropout}), label smoothing {LABEL_SMOOTHING}, tied embeddings; "
        f"best of {args.repeats} x {args.steps} steps\n"
    )
    print(
        "| config | precision | system | mode | params | step ms | target tokens/s | MFU | "
        "x best peer |"
    )
    print("|---|---|---|---|---:|---:|---:|---:|---:|")

    def cell(value, form):
        return "-" if value is None else form.format(value)

    for r in rows:
        if r["step_s"] is None:
            print(
                f"| {r['config']} | {r['precision']} | {r['system']} | {r['mode']} | "
                f"{r['status']} | - | - | - | - |"
            )
            continue
        print(
            f"| {r['config']} | {r['precision']} | {r['system']} | {r['mode']} | "
            f"{r['params'] / 1e6:.2f}M | {1000 * r['step_s']:.1f} | "
            f"{r['tokens_per_s']:.0f} | {cell(r['mfu'] and 100 * r['mfu'], '{:.1f}%')} | "
            f"{cell(r['x_best_peer'], '{:.2f}')} |"
        )
    print()
    for name, by_precision in headline.items():
        for precision, h in by_precision.items():
            matched = ", ".join(f"{k} {cell(v, '{:.2f}x')}" for k, v in h["matched"].items())
            print(
                f"{name} {precision}: ours best ({h['ours_best']}) "
                f"{cell(h['over_best_peer'], '{:.2f}x')} the best peer ({h['best_peer']}); "
                f"matched: {matched}"
            )
    print(
        json.dumps(
            {
                "benchmark": "train_throughput",
                "backend": args.backend,
                "device": device or "cpu",
                **machine,
                "threads": args.threads,
                "peak_gflops": {p: round(v / 1e9, 1) for p, v in peak.items()},
                "batch": args.batch,
                "length": args.length,
                "vocab_size": args.vocab_size,
                "steps": args.steps,
                "repeats": args.repeats,
                "attention_dropout": args.attention_dropout,
                **headline,
                "skipped_peers": skipped_peers,
                "skipped_rows": skipped_rows,
                "failed_rows": failed,
            }
        )
    )


if __name__ == "__main__":
    main()
