"""Train-step throughput (target tokens/s) and MFU: ours against two peers at identical dims.

For each config (tiny, small, base) and the same fixed batch (B sentences of L source and L
target tokens, no padding, vocabulary V), times full training steps (forward, label-smoothed
loss, backward, Adam update) of:

- ours: `keras_transformer.training.TrainingModel` (the token-exact train step of `train()`)
  with `model.fit`, without and with XLA (`jit_compile`), in each `--precision` (float32, and
  `mixed_bfloat16` as `precision: mixed_bfloat16` trains: bfloat16 compute, float32 weights);
- keras-hub: `TokenAndPositionEmbedding` + `TransformerEncoder`/`TransformerDecoder` stacks +
  a Dense softmax layer, compiled with Adam and sparse cross-entropy (what a Keras user builds
  today; Keras resolves its `jit_compile="auto"` to XLA on TensorFlow);
- PyTorch: `nn.Embedding` + `nn.Transformer` (batch_first, post-norm) + `nn.Linear`, Adam,
  `CrossEntropyLoss(label_smoothing=0.1)`, eager.

MFU = model FLOPs per second / the machine's measured matmul peak (best of TensorFlow's and
PyTorch's float32 matmul rate on large square matrices; bfloat16 rows too are divided by it).
Model FLOPs = 3 x the forward matmul and attention FLOPs of the encoder-decoder at these dims
(the same formula for all three).

Each timing is the best of `--repeats` windows of `--steps` steps after a warm-up (compilation)
window; the cores are shared, so the best window is the least disturbed one. Prints a table,
and last one JSON line with the headline figures. A peer that is not installed is skipped with
one line and listed under "skipped_peers" in the JSON (`pip install -e ".[bench]"` installs
every peer).

Usage:
    python benchmarks/train_throughput.py [--configs tiny small base] [--batch 32]
        [--length 32] [--steps 5] [--repeats 3] [--precision float32 mixed_bfloat16]
"""

import argparse
import json
import os
import pathlib
import platform
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from peers import importable_peers  # noqa: E402  (benchmarks/peers.py)

PEER_MODULES = {"keras_hub": "keras_hub", "torch": "torch"}
CONFIGS = {  # name -> (N, d_model, d_ff, h)
    "tiny": (1, 64, 256, 4),
    "small": (3, 256, 1024, 4),
    "base": (6, 512, 2048, 8),
    "multi30k": (4, 128, 256, 4),  # Wu et al.'s Transformer-tiny (pipelines/multi30k.py)
}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=["tiny", "small", "base"], choices=list(CONFIGS))
    parser.add_argument("--batch", type=int, default=32, help="sentences per batch")
    parser.add_argument("--length", type=int, default=32, help="source and target length")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--steps", type=int, default=5, help="steps per timed window")
    parser.add_argument("--repeats", type=int, default=3, help="timed windows (best kept)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="CPU threads for TensorFlow and PyTorch alike")
    parser.add_argument("--peers", nargs="+", default=["keras_hub", "torch"],
                        choices=["keras_hub", "torch"])
    parser.add_argument("--no-xla", action="store_true", help="skip ours with XLA")
    parser.add_argument("--precision", nargs="+", default=["float32"],
                        choices=["float32", "mixed_bfloat16"],
                        help="numerics of ours (default: float32; peers are float32)")
    return parser.parse_args()


# -- FLOPs and peak ----------------------------------------------------------------------------

def training_flops(num_layers, d_model, d_ff, vocab_size, batch, length):
    """3 x forward FLOPs (multiply-add = 2) of one step: projections, feed-forward, attention
    scores and weighted sums, cross-attention, and the output projection."""
    tokens = batch * length
    d, f = d_model, d_ff
    encoder = tokens * 2 * (4 * d * d + 2 * d * f) + 2 * 2 * batch * length * length * d
    decoder = (tokens * 2 * (4 * d * d + 2 * d * d + 2 * d * f)  # self Q,K,V,O + cross Q,O + FFN
               + tokens * 2 * 2 * d * d                            # cross K,V on the memory
               + 2 * 2 * batch * length * length * d * 2)          # self + cross attention
    output = tokens * 2 * d * vocab_size
    return 3 * (num_layers * (encoder + decoder) + output)


def matmul_peak(size=2048, repeats=5):
    """Best float32 matmul FLOP/s of TensorFlow and of PyTorch (when installed)."""
    a = tf.random.normal((size, size))
    b = tf.random.normal((size, size))
    flops = 2 * size ** 3
    best = {}
    tf.matmul(a, b).numpy()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        tf.matmul(a, b).numpy()
        times.append(time.perf_counter() - start)
    best["tensorflow"] = flops / min(times)
    try:
        import torch
    except ImportError:
        return best
    x, y = torch.randn(size, size), torch.randn(size, size)
    torch.matmul(x, y)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.matmul(x, y)
        times.append(time.perf_counter() - start)
    best["torch"] = flops / min(times)
    return best


# -- data --------------------------------------------------------------------------------------

def make_batch(batch, length, vocab_size, seed=0):
    rng = np.random.default_rng(seed)
    source = rng.integers(4, vocab_size, size=(batch, length)).astype("int32")
    labels = rng.integers(4, vocab_size, size=(batch, length)).astype("int32")
    target = np.concatenate([np.full((batch, 1), 2, "int32"), labels[:, :-1]], axis=1)
    return source, target, labels


# -- timing of Keras models --------------------------------------------------------------------

class _StepTimer:
    """Wall time of `fit` windows; reading the loss forces the step to finish."""

    def __init__(self):
        import keras

        class Callback(keras.callbacks.Callback):
            def on_train_begin(inner, logs=None):
                self.start = time.perf_counter()

            def on_train_end(inner, logs=None):
                float(np.asarray(inner.model.optimizer.iterations.value))
                self.seconds = time.perf_counter() - self.start

        self.callback = Callback()


def time_keras(model, dataset, steps, repeats):
    timer = _StepTimer()
    model.fit(dataset, steps_per_epoch=2, epochs=1, verbose=0, shuffle=False)  # compile
    windows = []
    for _ in range(repeats):
        model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False,
                  callbacks=[timer.callback])
        windows.append(timer.seconds)
    return min(windows)


def ours(dims, vocab_size, data, steps, repeats, xla, precision="float32"):
    import keras

    from keras_transformer import TransformerConfig, build_model, build_optimizer
    from keras_transformer.training import TrainingModel

    num_layers, d_model, d_ff, heads = dims
    keras.utils.set_random_seed(0)
    config = TransformerConfig(vocab_size=vocab_size, num_layers=num_layers, d_model=d_model,
                               d_ff=d_ff, num_heads=heads, max_length=256)
    model = TrainingModel(build_model(config,
                                      dtype=None if precision == "float32" else precision))
    optimizer = build_optimizer(d_model)
    model.compile(optimizer=optimizer, jit_compile=xla)
    optimizer.build(model.transformer.trainable_variables)
    source, target, labels = data
    dataset = tf.data.Dataset.from_tensors(
        (({"source_ids": source, "target_ids": target}, labels),)).repeat()
    seconds = time_keras(model, dataset, steps, repeats)
    return seconds, model.transformer.count_params()


def keras_hub_model(dims, vocab_size, data, steps, repeats):
    import keras
    import keras_hub

    num_layers, d_model, d_ff, heads = dims
    keras.utils.set_random_seed(0)
    source_ids = keras.Input((None,), dtype="int32", name="source_ids")
    target_ids = keras.Input((None,), dtype="int32", name="target_ids")
    x = keras_hub.layers.TokenAndPositionEmbedding(vocab_size, 256, d_model,
                                                   mask_zero=True)(source_ids)
    for _ in range(num_layers):
        x = keras_hub.layers.TransformerEncoder(d_ff, heads, dropout=0.1)(x)
    y = keras_hub.layers.TokenAndPositionEmbedding(vocab_size, 256, d_model,
                                                   mask_zero=True)(target_ids)
    for _ in range(num_layers):
        y = keras_hub.layers.TransformerDecoder(d_ff, heads, dropout=0.1)(y, x)
    logits = keras.layers.Dense(vocab_size)(y)
    model = keras.Model({"source_ids": source_ids, "target_ids": target_ids}, logits)
    model.compile(optimizer=keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                   ignore_class=0))
    source, target, labels = data
    dataset = tf.data.Dataset.from_tensors(
        ({"source_ids": source, "target_ids": target}, labels)).repeat()
    seconds = time_keras(model, dataset, steps, repeats)
    return seconds, model.count_params(), bool(model.jit_compile)


def torch_model(dims, vocab_size, data, steps, repeats, threads):
    import torch
    from torch import nn

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    num_layers, d_model, d_ff, heads = dims

    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.source_embedding = nn.Embedding(vocab_size, d_model, padding_idx=0)
            self.target_embedding = nn.Embedding(vocab_size, d_model, padding_idx=0)
            self.positions = nn.Embedding(256, d_model)
            self.transformer = nn.Transformer(d_model, heads, num_layers, num_layers, d_ff,
                                              dropout=0.1, batch_first=True)
            self.output = nn.Linear(d_model, vocab_size)

        def forward(self, source, target):
            positions = torch.arange(source.shape[1])
            # Boolean like the padding masks (True = masked): one mask type for all of them.
            length = target.shape[1]
            mask = torch.triu(torch.ones(length, length, dtype=torch.bool), diagonal=1)
            hidden = self.transformer(
                self.source_embedding(source) + self.positions(positions),
                self.target_embedding(target) + self.positions(positions[:target.shape[1]]),
                tgt_mask=mask, tgt_is_causal=True,
                src_key_padding_mask=source == 0, memory_key_padding_mask=source == 0,
                tgt_key_padding_mask=target == 0)
            return self.output(hidden)

    model = Seq2Seq()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    loss_fn = nn.CrossEntropyLoss(ignore_index=0, label_smoothing=0.1)
    source, target, labels = (torch.from_numpy(a.astype("int64")) for a in data)

    def step():
        optimizer.zero_grad(set_to_none=True)
        logits = model(source, target)
        loss = loss_fn(logits.reshape(-1, vocab_size), labels.reshape(-1))
        loss.backward()
        optimizer.step()
        return loss.item()

    model.train()
    for _ in range(2):
        step()
    windows = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        windows.append(time.perf_counter() - start)
    return min(windows), sum(p.numel() for p in model.parameters())


def main():
    args = parse_args()
    peers, skipped_peers = importable_peers(args.peers, PEER_MODULES)
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    peaks = matmul_peak()
    peak = max(peaks.values())
    tokens_per_step = args.batch * args.length
    rows, headline = [], {}
    for name in args.configs:
        dims = CONFIGS[name]
        data = make_batch(args.batch, args.length, args.vocab_size)
        flops = training_flops(dims[0], dims[1], dims[2], args.vocab_size, args.batch,
                               args.length)
        runs = []
        for precision in args.precision:
            for xla in [False] if args.no_xla else [False, True]:
                seconds, params = ours(dims, args.vocab_size, data, args.steps, args.repeats,
                                       xla=xla, precision=precision)
                system = "ours" if precision == "float32" else f"ours {precision}"
                runs.append((system, seconds, params, "yes" if xla else "no"))
        if "keras_hub" in peers:
            seconds, params, xla = keras_hub_model(dims, args.vocab_size, data, args.steps,
                                                   args.repeats)
            runs.append(("keras-hub", seconds, params, "yes" if xla else "no"))
        if "torch" in peers:
            seconds, params = torch_model(dims, args.vocab_size, data, args.steps,
                                          args.repeats, args.threads)
            runs.append(("torch nn.Transformer", seconds, params, "eager"))
        for system, seconds, params, xla in runs:
            step_seconds = seconds / args.steps
            rows.append({"config": name, "system": system, "xla": xla, "params": params,
                         "step_s": step_seconds, "tokens_per_s": tokens_per_step / step_seconds,
                         "mfu": flops / step_seconds / peak})
        config_rows = [r for r in rows if r["config"] == name]
        ours_rows = [r for r in config_rows if r["system"].startswith("ours")]
        best = max(ours_rows, key=lambda r: r["tokens_per_s"])
        best_ours = best["tokens_per_s"]
        peers = [r["tokens_per_s"] for r in config_rows if not r["system"].startswith("ours")]
        headline[name] = {"ours_tokens_per_s": round(best_ours, 1),
                          "mfu": round(best["mfu"], 4), "best": f"{best['system']}, XLA "
                                                               f"{best['xla']}"}
        fp32 = [r["tokens_per_s"] for r in ours_rows if r["system"] == "ours"]
        bf16 = [r["tokens_per_s"] for r in ours_rows if r["system"] != "ours"]
        if fp32 and bf16:
            headline[name]["bf16_over_fp32"] = round(max(bf16) / max(fp32), 3)
        if peers:
            headline[name]["over_faster_peer"] = round(best_ours / max(peers), 3)
        print(f"[{name}] done", file=sys.stderr, flush=True)

    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, threads {args.threads}; "
          f"TF {tf.__version__}; matmul peak " + ", ".join(
              f"{k} {v / 1e9:.1f} GFLOP/s" for k, v in peaks.items()))
    print(f"batch {args.batch} x {args.length} source + {args.length} target tokens, vocab "
          f"{args.vocab_size}, best of {args.repeats} x {args.steps} steps\n")
    print("| config | system | XLA | params | step s | target tokens/s | MFU |")
    print("|---|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['config']} | {r['system']} | {r['xla']} | {r['params'] / 1e6:.2f}M | "
              f"{r['step_s']:.3f} | {r['tokens_per_s']:.0f} | {100 * r['mfu']:.1f}% |")
    print(json.dumps({"benchmark": "train_throughput", "machine": f"{os.cpu_count()}-CPU "
                      f"{platform.machine()}", "peak_gflops": round(peak / 1e9, 1),
                      "batch": args.batch, "length": args.length, **headline,
                      "skipped_peers": skipped_peers}))


if __name__ == "__main__":
    main()
