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
import math
import os
import subprocess
import sys
import time

import numpy as np

from benchmarks.common import (
    best_seconds,
    importable_peers,
    machine_line,
    machine_record,
    run_module,
    speed_ratios,
)

PEER_MODULES = {"keras_hub": "keras_hub", "torch": "torch"}
CONFIGS = {  # name -> (N, d_model, d_ff, h)
    "tiny": (1, 64, 256, 4),
    "small": (3, 256, 1024, 4),
    "base": (6, 512, 2048, 8),
    "multi30k": (4, 128, 256, 4),  # Wu et al.'s Transformer-tiny (configs/multi30k.yaml)
    "big": (6, 1024, 4096, 16),
}
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
DROPOUT = 0.1
LABEL_SMOOTHING = 0.1
MAX_LENGTH = 256
SLOW_BF16 = 0.25  # bf16 rows of a framework whose bf16 matmul is slower than this x fp32


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


def training_flops(num_layers, d_model, d_ff, vocab_size, batch, length):
    """3 x forward FLOPs (multiply-add = 2) of one step: projections, feed-forward, attention
    scores and weighted sums, cross-attention, and the output projection."""
    tokens = batch * length
    d, f = d_model, d_ff
    encoder = tokens * 2 * (4 * d * d + 2 * d * f) + 2 * 2 * batch * length * length * d
    decoder = (
        tokens * 2 * (4 * d * d + 2 * d * d + 2 * d * f)  # self Q,K,V,O + cross Q,O + FFN
        + tokens * 2 * 2 * d * d  # cross K,V on the memory
        + 2 * 2 * batch * length * length * d * 2
    )  # self + cross attention
    output = tokens * 2 * d * vocab_size
    return 3 * (num_layers * (encoder + decoder) + output)


def matmul_rate(make_product, size=2048, probe=512, repeats=5, budget_s=5.0):
    """Best FLOP/s of a size x size product; `make_product(n)` returns a callable that runs
    one n x n product (operands made beforehand). A probe size first: when the full size
    would take over `budget_s` a product (a precision without fast kernels on this CPU, e.g.
    PyTorch bfloat16 without AVX512-BF16: under 1 GFLOP/s), the probe's rate is kept."""

    probe_seconds = best_seconds(make_product(probe), repeats=2)
    if probe_seconds * (size / probe) ** 3 > budget_s:
        return 2 * probe**3 / probe_seconds
    return 2 * size**3 / best_seconds(make_product(size), repeats=repeats)


def gpu_matmul_peaks(precisions, use_torch):
    """`({precision: {framework: FLOP/s}}, GPU name)`: 8192 x 8192 products on the GPU, JAX's
    and PyTorch's, fp32 without TF32 (as the fp32 rows run)."""
    import jax
    import jax.numpy as jnp

    def jax_product(dtype):
        def make(n):
            a, b = (jax.random.normal(jax.random.key(i), (n, n), dtype) for i in (1, 2))
            product = jax.jit(lambda a, b: jnp.matmul(a, b, precision="highest"))
            return lambda: product(a, b).block_until_ready()

        return make

    dtypes = {"fp32": "float32", "bf16": "bfloat16"}
    precisions = ["fp32"] + [p for p in precisions if p != "fp32"]
    peaks = {
        p: {"jax": matmul_rate(jax_product(dtypes[p]), size=8192, probe=2048)} for p in precisions
    }
    device = jax.devices()[0].device_kind
    if use_torch:
        import torch

        if torch.cuda.is_available():

            def torch_product(dtype):
                def make(n):
                    a, b = (torch.randn(n, n, device="cuda", dtype=dtype) for _ in range(2))
                    return lambda: (torch.matmul(a, b), torch.cuda.synchronize())

                return make

            for p in precisions:
                peaks[p]["torch"] = matmul_rate(
                    torch_product(getattr(torch, dtypes[p])), size=8192, probe=2048
                )
    return peaks, device


def matmul_peaks(precisions, threads, use_torch):
    """`{precision: {framework: FLOP/s}}` for fp32 and the requested precisions."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    dtypes = {"fp32": "float32", "bf16": "bfloat16"}
    precisions = ["fp32"] + [p for p in precisions if p != "fp32"]  # bf16 is judged by fp32

    def tf_product(dtype):
        def make(n):
            a = tf.cast(tf.random.normal((n, n)), dtype)
            b = tf.cast(tf.random.normal((n, n)), dtype)
            return lambda: float(tf.matmul(a, b)[0, 0])

        return make

    peaks = {p: {"tensorflow": matmul_rate(tf_product(dtypes[p]))} for p in precisions}
    if use_torch:
        import torch

        torch.set_num_threads(threads)

        def torch_product(dtype):
            def make(n):
                a, b = (torch.randn(n, n).to(dtype) for _ in range(2))
                return lambda: torch.matmul(a, b)

            return make

        for p in precisions:
            peaks[p]["torch"] = matmul_rate(torch_product(getattr(torch, dtypes[p])))
    return peaks


def slow_bf16(peaks, framework, threshold=SLOW_BF16):
    """Why `framework`'s bf16 rows are not worth running here, or None: its bfloat16 matmul
    rate is under `threshold` x its float32 rate (no bf16 kernels for this CPU)."""
    try:
        bf16, fp32 = peaks["bf16"][framework], peaks["fp32"][framework]
    except KeyError:
        return None
    if bf16 >= threshold * fp32:
        return None
    return (
        f"{framework}'s bfloat16 matmul runs at {bf16 / 1e9:.1f} GFLOP/s here, under "
        f"{threshold:g} x its float32 {fp32 / 1e9:.1f} (no fast bf16 kernels on this CPU; "
        f"--run-slow-bf16 runs them anyway)"
    )


# -- data --------------------------------------------------------------------------------------


def make_batch(batch, length, vocab_size, seed=0):
    """Source, decoder input (bos + labels[:-1]) and labels; ids >= 4: no padding anywhere."""
    rng = np.random.default_rng(seed)
    source = rng.integers(4, vocab_size, size=(batch, length)).astype("int32")
    labels = rng.integers(4, vocab_size, size=(batch, length)).astype("int32")
    target = np.concatenate([np.full((batch, 1), 2, "int32"), labels[:, :-1]], axis=1)
    return source, target, labels


# -- Keras systems -----------------------------------------------------------------------------


def keras_inputs(spec, data, nested=False):
    """`model.fit`'s inputs for one fixed batch at every step: a repeated tf.data element on
    TensorFlow (`nested`: a 1-tuple of micro-batches, `TrainingModel`'s input), the batch
    tiled in NumPy arrays on JAX (no tf.data there)."""
    source, target, labels = data
    features = {"source_ids": source, "target_ids": target}
    copies = spec["warmup"] + spec["repeats"] * spec["steps"]
    if spec["backend"] == "tensorflow":
        import tensorflow as tf

        element = ((features, labels),) if nested else (features, labels)
        return {"x": tf.data.Dataset.from_tensors(element).repeat(), "steps_per_epoch": copies}
    return {
        "x": {name: np.tile(ids, (copies, 1)) for name, ids in features.items()},
        "y": np.tile(labels, (copies, 1)),
        "batch_size": len(source),
    }


def time_keras(model, inputs, steps, repeats, warmup):
    """Best of `repeats` windows of `steps` steps, all in one `fit` call after `warmup`
    (compiling) steps: each new `fit` call retraces its train function, and with XLA that
    recompiles it (seconds), so windows in separate calls would time compilation. A window
    runs from its first step's start to its last step's end (reading a variable waits for
    the step; on JAX, reading the loss does)."""
    import keras

    marks = []

    class Timer(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch >= warmup and (batch - warmup) % steps == 0:
                marks.append(time.perf_counter())

        def on_train_batch_end(self, batch, logs=None):
            if batch >= warmup and (batch - warmup) % steps == steps - 1:
                float(np.asarray(self.model.optimizer.iterations.value))
                if logs and "loss" in logs:
                    float(logs["loss"])
                marks[-1] = time.perf_counter() - marks[-1]

    model.fit(**inputs, epochs=1, verbose=0, shuffle=False, callbacks=[Timer()])
    return min(marks)


def keras_dtype(precision):
    return None if precision == "fp32" else "mixed_bfloat16"


def build_ours(dims, vocab_size, precision, attention_dropout, plain=False):
    """`TrainingModel` around our Transformer, or (`plain`) the Transformer alone."""
    import keras

    from keras_transformer import TransformerConfig, build_model

    num_layers, d_model, d_ff, heads = dims
    keras.utils.set_random_seed(0)
    config = TransformerConfig(
        vocab_size=vocab_size,
        num_layers=num_layers,
        d_model=d_model,
        d_ff=d_ff,
        num_heads=heads,
        max_length=MAX_LENGTH,
        dropout=DROPOUT,
        label_smoothing=LABEL_SMOOTHING,
        attention_dropout=attention_dropout,
    )
    transformer = build_model(config, dtype=keras_dtype(precision))
    if plain:
        return transformer
    from keras_transformer.training import TrainingModel  # TensorFlow only

    return TrainingModel(transformer)


def run_ours(spec, data):
    from keras_transformer import build_optimizer
    from keras_transformer.losses import LabelSmoothedCrossEntropy

    plain = spec["backend"] != "tensorflow"
    model = build_ours(
        spec["dims"], spec["vocab_size"], spec["precision"], spec["attention_dropout"], plain=plain
    )
    optimizer = build_optimizer(spec["dims"][1])
    transformer = model if plain else model.transformer
    # TrainingModel computes its own loss; the plain Transformer is given the same one.
    loss = LabelSmoothedCrossEntropy(LABEL_SMOOTHING, pad_id=0) if plain else None
    model.compile(optimizer=optimizer, loss=loss, jit_compile=spec["mode"] == "xla_on")
    optimizer.build(transformer.trainable_variables)
    seconds = time_keras(
        model,
        keras_inputs(spec, data, nested=not plain),
        spec["steps"],
        spec["repeats"],
        spec["warmup"],
    )
    return seconds, transformer.count_params(), bool(model.jit_compile)


def build_keras_hub(dims, vocab_size, precision, attention_dropout):
    """The same network from keras-hub layers (see the module docstring); no padding masks."""
    import keras
    import keras_hub

    num_layers, d_model, d_ff, heads = dims
    dtype = keras_dtype(precision)
    keras.utils.set_random_seed(0)
    # One matrix for source, target and (reversed) the output projection, as ours.
    embedding = keras_hub.layers.ReversibleEmbedding(
        vocab_size,
        d_model,
        tie_weights=True,
        dtype=dtype,
        embeddings_initializer=keras.initializers.RandomNormal(stddev=d_model**-0.5),
    )
    positions = keras_hub.layers.SinePositionEncoding(dtype=dtype)

    def embed(ids):
        x = embedding(ids) * math.sqrt(d_model)
        return keras.layers.Dropout(DROPOUT, dtype=dtype)(x + positions(x))

    source_ids = keras.Input((None,), dtype="int32", name="source_ids")
    target_ids = keras.Input((None,), dtype="int32", name="target_ids")
    stack_args = dict(
        intermediate_dim=d_ff,
        num_heads=heads,
        dropout=DROPOUT,
        layer_norm_epsilon=1e-6,
        dtype=dtype,
    )
    encoders = [keras_hub.layers.TransformerEncoder(**stack_args) for _ in range(num_layers)]
    decoders = [keras_hub.layers.TransformerDecoder(**stack_args) for _ in range(num_layers)]
    x = embed(source_ids)
    for layer in encoders:
        x = layer(x)
    y = embed(target_ids)
    for layer in decoders:
        y = layer(y, x)  # causal self-attention by default
    logits = keras.layers.Activation("linear", dtype="float32")(embedding(y, reverse=True))
    # keras-hub's `dropout` also drops attention probabilities; ours does not (attention
    # dropout 0 by default). Keras reads the rate at call time (0 also selects its
    # `ops.dot_product_attention` path), so setting it after construction is enough.
    for layer in encoders + decoders:
        for attention in (
            layer._self_attention_layer,
            getattr(layer, "_cross_attention_layer", None),
        ):
            if attention is not None:
                attention._dropout = attention_dropout
    return keras.Model({"source_ids": source_ids, "target_ids": target_ids}, logits)


def run_keras_hub(spec, data):
    import keras

    from keras_transformer import NoamSchedule
    from keras_transformer.losses import LabelSmoothedCrossEntropy

    model = build_keras_hub(
        spec["dims"], spec["vocab_size"], spec["precision"], spec["attention_dropout"]
    )
    optimizer = keras.optimizers.Adam(
        learning_rate=NoamSchedule(spec["dims"][1]), beta_1=0.9, beta_2=0.98, epsilon=1e-9
    )
    model.compile(
        optimizer=optimizer,
        loss=LabelSmoothedCrossEntropy(LABEL_SMOOTHING, pad_id=0),
        jit_compile=spec["mode"] == "xla_on",
    )
    seconds = time_keras(
        model, keras_inputs(spec, data), spec["steps"], spec["repeats"], spec["warmup"]
    )
    return seconds, model.count_params(), bool(model.jit_compile)


# -- PyTorch -----------------------------------------------------------------------------------


def build_torch(dims, vocab_size, attention_dropout):
    """The same network from `nn.Transformer*Layer`s (see the module docstring): a module whose
    forward returns the label-smoothed loss (so that `torch.compile` sees loss and model)."""
    import torch
    from torch import nn
    from torch.nn import functional

    num_layers, d_model, d_ff, heads = dims
    torch.manual_seed(0)

    def sinusoids(length):
        position = torch.arange(length, dtype=torch.float32)[:, None]
        angles = position / torch.pow(10000.0, torch.arange(0, d_model, 2) / d_model)
        return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(length, d_model)

    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(vocab_size, d_model)  # source, target and output
            nn.init.normal_(self.embedding.weight, std=d_model**-0.5)
            self.register_buffer("positions", sinusoids(MAX_LENGTH), persistent=False)
            self.embedding_dropout = nn.Dropout(DROPOUT)
            layer_args = dict(
                d_model=d_model,
                nhead=heads,
                dim_feedforward=d_ff,
                dropout=DROPOUT,
                batch_first=True,
                norm_first=False,
                layer_norm_eps=1e-6,
            )
            # No final LayerNorm (nn.Transformer adds one to each stack; post-norm has none).
            self.encoder = nn.TransformerEncoder(
                nn.TransformerEncoderLayer(**layer_args),
                num_layers,
                norm=None,
                enable_nested_tensor=False,
            )
            self.decoder = nn.TransformerDecoder(
                nn.TransformerDecoderLayer(**layer_args), num_layers, norm=None
            )
            for layer in [*self.encoder.layers, *self.decoder.layers]:
                layer.dropout = nn.Identity()  # the dropout after the ReLU: ours has none
                for attention in (layer.self_attn, getattr(layer, "multihead_attn", None)):
                    if attention is not None:
                        attention.dropout = attention_dropout
            causal = torch.full((MAX_LENGTH, MAX_LENGTH), float("-inf")).triu(1)
            self.register_buffer("causal_mask", causal, persistent=False)
            self.loss = nn.CrossEntropyLoss(ignore_index=0, label_smoothing=LABEL_SMOOTHING)

        def embed(self, ids):
            x = self.embedding(ids) * math.sqrt(d_model) + self.positions[: ids.shape[1]]
            return self.embedding_dropout(x)

        def forward(self, source, target, labels):
            # No key-padding masks: the batch has no padding (they would merge into per-head
            # float masks and take attention off the fused causal kernel).
            memory = self.encoder(self.embed(source))
            length = target.shape[1]
            hidden = self.decoder(
                self.embed(target),
                memory,
                tgt_mask=self.causal_mask[:length, :length],
                tgt_is_causal=True,
            )
            logits = functional.linear(hidden, self.embedding.weight).float()
            return self.loss(logits.reshape(-1, vocab_size), labels.reshape(-1))

    return Seq2Seq()


def run_torch(spec, data):
    import torch

    torch.set_num_threads(spec["threads"])
    device = "cuda" if spec["backend"] == "jax" and torch.cuda.is_available() else "cpu"
    model = build_torch(spec["dims"], spec["vocab_size"], spec["attention_dropout"]).to(device)
    d_model = spec["dims"][1]
    adam = dict(lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    try:
        optimizer = torch.optim.Adam(model.parameters(), fused=True, **adam)
    except (RuntimeError, TypeError, ValueError):  # no fused CPU Adam in this PyTorch
        optimizer = torch.optim.Adam(model.parameters(), foreach=True, **adam)
    # The Noam schedule of build_optimizer (learning rate = factor x base lr 1.0).
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: d_model**-0.5 * min((step + 1) ** -0.5, (step + 1) * 4000**-1.5)
    )
    loss_of = torch.compile(model) if spec["mode"] == "compile" else model
    source, target, labels = (torch.from_numpy(a.astype("int64")).to(device) for a in data)
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=spec["precision"] == "bf16")

    def step():
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            loss = loss_of(source, target, labels)
        loss.backward()
        optimizer.step()
        schedule.step()
        return loss.item()

    model.train()
    # The warm-up steps include compilation; `loss.item()` waits for each step.
    seconds = spec["steps"] * best_seconds(step, spec["steps"], spec["repeats"], spec["warmup"])
    return seconds, sum(p.numel() for p in model.parameters()), spec["mode"] == "compile"


# -- one row per child process -----------------------------------------------------------------

RESULT_PREFIX = "RESULT "


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
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def in_child(spec, timeout=None, module="benchmarks.train_throughput"):
    """Runs `python -m module --worker SPEC` (this module's `worker(spec)` by default) in a
    fresh interpreter and returns what it printed after RESULT_PREFIX; `{"error": ...}` if it
    died or timed out."""
    try:
        process = run_module(module, "--worker", json.dumps(spec), timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"stopped after --row-timeout {timeout:g} s"}
    for line in reversed(process.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    if process.returncode < 0:
        return {"error": f"child killed by signal {-process.returncode}"}
    lines = process.stderr.strip().splitlines()
    errors = [line for line in lines if "Error" in line or "error:" in line]
    last = (errors or lines or ["no output"])[-1]
    return {"error": f"child exited with status {process.returncode}: {last}"[:300]}


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
        {
            "kind": "peaks",
            "precisions": args.precisions,
            "backend": args.backend,
            "threads": args.threads,
            "use_torch": "torch" in present,
        }
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
                    result = in_child(spec, timeout=args.row_timeout)
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
