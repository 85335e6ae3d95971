"""The systems that `train_throughput` and `step_floor` time: ours, keras-hub and PyTorch, each
built to do the work of our default train step (the configurations are described in
`benchmarks/train_throughput.py`), and one fixed batch to time them on.

Example:
    >>> model, inputs = build_ours(CONFIGS["tiny"], 1000, "fp32", 0.0)  # doctest: +SKIP
"""

import math
import time

import numpy as np

from benchmarks.common import best_seconds

PEER_MODULES = {"keras_hub": "keras_hub", "torch": "torch"}
CONFIGS = {  # name -> (N, d_model, d_ff, h)
    "tiny": (1, 64, 256, 4),
    "small": (3, 256, 1024, 4),
    "base": (6, 512, 2048, 8),
    "multi30k": (4, 128, 256, 4),  # Wu et al.'s Transformer-tiny (configs/multi30k.yaml)
    "big": (6, 1024, 4096, 16),
}
DROPOUT = 0.1
LABEL_SMOOTHING = 0.1
MAX_LENGTH = 256


def make_batch(batch, length, vocab_size, seed=0):
    """Source, decoder input (bos + labels[:-1]) and labels; ids >= 4: no padding anywhere."""
    rng = np.random.default_rng(seed)
    source = rng.integers(4, vocab_size, size=(batch, length)).astype("int32")
    labels = rng.integers(4, vocab_size, size=(batch, length)).astype("int32")
    target = np.concatenate([np.full((batch, 1), 2, "int32"), labels[:, :-1]], axis=1)
    return source, target, labels


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
