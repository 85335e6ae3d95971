"""The `--cpu` parsing recipe on one GPU (KERAS_BACKEND=jax, no TensorFlow), to try recipe
changes in minutes that take the CPU two hours (benchmarks/README.md, parsing runs 10 and 14).

`model.fit` on `prep.py`'s ids, batched as the tf.data pipeline: corpora sampled by weight,
tensor2tensor buckets by the longer side, token_budget // the bucket's longest length pairs
per batch; then padded to five fixed shapes (one XLA compile each). The model, loss, Adam and
schedules are the library's. Every 500 updates the weights are kept; at each milestone (avg5
only) and at the end (each `--avg`, and `--ema` if given) the dev set is parsed with the
tree-constrained beam search (beam 21, alpha 0.3, input + 300; compiled once, the weights
passed in) and the output ids go to NAME.json in --out, which `score.py` scores here.

    python3 benchmarks/parsing_gpu/train.py --data runs/parsing_gpu/wsjgum --name lin14k \
        --decay linear --steps 14000 --milestones 9000 --avg 5,10 --ema 0.9995 --spe 10

Not the pipeline: no dev loss, no checkpoints on disk, no resume; its dev F1 matched the CPU
pipeline's within a seed's spread at 9000 updates (77.87 / 77.49 here against 77.19).
"""

import argparse
import collections
import json
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

p = argparse.ArgumentParser()
p.add_argument("--data", default="runs/parsing_gpu/wsjgum")
p.add_argument("--name", default="base")
p.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
p.add_argument("--steps", type=int, default=14000)
p.add_argument("--deadline", type=float, default=1e9, help="seconds of training, then stop")
p.add_argument("--milestones", default="14000")
p.add_argument("--avg", default="5,10")
p.add_argument("--ema", type=float, default=0.0)
p.add_argument("--lr-scale", type=float, default=0.3)
p.add_argument("--warmup", type=int, default=500)
p.add_argument("--decay", default="rsqrt", choices=["rsqrt", "linear"])
p.add_argument("--dropout", type=float, default=None)
p.add_argument("--attention-dropout", type=float, default=None)
p.add_argument("--gum-weight", type=float, default=1.0)
p.add_argument("--budget", type=int, default=2048)
p.add_argument("--seed", type=int, default=1)
p.add_argument("--spe", type=int, default=1, help="steps_per_execution")
p.add_argument("--precision", default="mixed_bfloat16")
p.add_argument("--dev-lines", type=int, default=0)
p.add_argument("--epoch-steps", type=int, default=500)
p.add_argument("--tiny", action="store_true")
args = p.parse_args()

import keras  # noqa: E402

from keras_transformer import TransformerConfig, build_model  # noqa: E402
from keras_transformer.decoding.beam_search import BeamSearch  # noqa: E402
from keras_transformer.losses import LabelSmoothedCrossEntropy  # noqa: E402
from keras_transformer.parsing.constrained_decoding import TreeConstrainedDecoder, TreeConstraint  # noqa
from keras_transformer.parsing.linearization import Linearizer  # noqa: E402
from keras_transformer.schedules import build_schedule  # noqa: E402
from keras_transformer.translation import compile_search  # noqa: E402

T0 = time.time()
meta = json.load(open(args.data + ".json"))
arrays = np.load(args.data + ".npz")
cfg = dict(meta["config"])
if args.dropout is not None:
    cfg["dropout"] = args.dropout
if args.attention_dropout is not None:
    cfg["attention_dropout"] = args.attention_dropout
if args.tiny:
    cfg.update(num_layers=1, d_model=32, d_ff=64, num_heads=2, key_dim=16, value_dim=16)
config = TransformerConfig(**cfg)


def split(name):
    lengths = arrays[name + "_len"]
    flat = arrays[name]
    ends = np.cumsum(lengths)
    return [flat[e - n : e] for e, n in zip(ends, lengths)]


corpora = {}
weights = {"wsj": 1.0, "gum": args.gum_weight}
for c in ("wsj", "gum"):
    if c + "_src" in arrays and weights[c] > 0:
        corpora[c] = (split(c + "_src"), split(c + "_tgt"))
dev = split("dev_src")
if args.dev_lines:
    dev = dev[: args.dev_lines]

# data.batching.bucket_boundaries(1024) written out (its last boundary is 1025, this 1069: the
# same one pair per batch there), as that module imports TensorFlow, which
# the GPU machine does not have.
bounds = [8]
while bounds[-1] < 1025:
    bounds.append(max(bounds[-1] + 1, int(bounds[-1] * 1.1)))
SHAPES = [24, 48, 96, 192, 1024]  # padded lengths; rows: budget // smallest bucket end in group


def bucket_of(n):
    for i, b in enumerate(bounds):
        if n < b:
            return i
    return len(bounds) - 1


def group_of(upper):
    for L in SHAPES:
        if upper - 1 <= L:
            return L
    return SHAPES[-1]


rows_of = {}
for i, b in enumerate(bounds):
    L = group_of(b)
    rows_of[L] = max(rows_of.get(L, 0), args.budget // b)


def batches(seed):
    rng = np.random.default_rng(seed)
    names = list(corpora)
    w = np.array([weights[n] for n in names])
    w = w / w.sum()
    orders = {n: [] for n in names}
    pending = collections.defaultdict(list)
    while True:
        n = names[rng.choice(len(names), p=w)]
        if not orders[n]:
            orders[n] = list(rng.permutation(len(corpora[n][0])))
        k = orders[n].pop()
        s, t = corpora[n][0][k], corpora[n][1][k]
        longest = max(len(s), len(t) + 1)
        b = bucket_of(longest)
        size = max(1, args.budget // bounds[b])
        pending[b].append((s, t))
        if len(pending[b]) >= size:
            group = pending.pop(b)
            L = group_of(bounds[b])
            R = rows_of[L]
            src = np.zeros((R, L), np.int32)
            tin = np.zeros((R, L), np.int32)
            lab = np.zeros((R, L), np.int32)
            for r, (s, t) in enumerate(group):
                src[r, : len(s)] = s
                tin[r, 0] = 2
                tin[r, 1 : len(t) + 1] = t
                lab[r, : len(t)] = t
                lab[r, len(t)] = 3
            yield {"source_ids": src, "target_ids": tin}, lab


keras.utils.set_random_seed(args.seed)
model = build_model(config, dtype=args.precision)
lr = build_schedule(config.d_model, args.warmup, args.lr_scale, args.decay, args.steps)
opt_kw = dict(beta_1=0.9, beta_2=0.98, epsilon=1e-9)
if args.ema:
    opt_kw.update(use_ema=True, ema_momentum=args.ema)
optimizer = keras.optimizers.Adam(learning_rate=lr, **opt_kw)
model.compile(
    optimizer=optimizer,
    loss=LabelSmoothedCrossEntropy(0.1, pad_id=0),
    jit_compile=True,
    steps_per_execution=args.spe,
)

decode_model = build_model(config, dtype=args.precision)
constraint = TreeConstraint(meta["pieces"], Linearizer(word_slots=True))
decoder = TreeConstrainedDecoder(decode_model, constraint, 300)
search = BeamSearch(beam_size=21, alpha=0.3, max_extra_length=300)
run_search = compile_search(lambda s: tuple(search(decoder, s))[:2], decoder)
dev_len = max(len(s) for s in dev)
dev_ids = np.zeros((len(dev), dev_len), np.int32)
for i, s in enumerate(dev):
    dev_ids[i, : len(s)] = s

milestones = sorted(int(m) for m in args.milestones.split(",") if m)
avgs = [int(a) for a in args.avg.split(",") if a]
snapshots = collections.deque(maxlen=max(avgs + [1]))
result = {
    "args": vars(args),
    "log": [],
    "decodes": {},
    "shapes": {str(k): v for k, v in rows_of.items()},
}


def save():
    with open(os.path.join(args.out, f"{args.name}.json"), "w") as f:
        json.dump(result, f)


def decode(tag, values):
    for v, x in zip(decode_model.trainable_variables, values):
        v.assign(x)
    t = time.time()
    ids, lengths = run_search(dev_ids)
    ids = np.asarray(ids)[:, 0]
    lengths = np.asarray(lengths)[:, 0]
    result["decodes"][tag] = [ids[i, : lengths[i]].tolist() for i in range(len(dev))]
    result["log"].append({"decode": tag, "seconds": round(time.time() - t, 1)})
    print(f"[{args.name}] decoded {tag} in {time.time() - t:.1f}s", flush=True)
    save()


class Snap(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.t = time.time()
        self.start = None

    def on_epoch_end(self, epoch, logs=None):
        step = (epoch + 1) * args.epoch_steps
        now = time.time()
        if self.start is None:
            self.start = now
        snapshots.append([np.asarray(v.value) for v in model.trainable_variables])
        entry = {
            "step": step,
            "loss": round(float(logs.get("loss", 0)), 4),
            "seconds_500": round(now - self.t, 1),
            "elapsed": round(now - T0, 1),
        }
        result["log"].append(entry)
        print(f"[{args.name}] {entry}", flush=True)
        self.t = now
        out_of_time = now - T0 > args.deadline
        final = step >= args.steps or out_of_time
        if step in milestones or final:
            for k in avgs if final else avgs[:1]:
                if len(snapshots) >= k:
                    mean = [
                        np.mean([s[i].astype(np.float32) for s in list(snapshots)[-k:]], axis=0)
                        for i in range(len(snapshots[-1]))
                    ]
                    decode(f"{step}_avg{k}", mean)
            if args.ema and final:
                ema = [np.asarray(v.value) for v in optimizer._model_variables_moving_average]
                decode(f"{step}_ema", ema)
        self.t = time.time()
        if out_of_time:
            self.model.stop_training = True


print(f"[{args.name}] setup {time.time() - T0:.1f}s; shapes {rows_of}", flush=True)
model.fit(
    batches(args.seed),
    steps_per_epoch=args.epoch_steps,
    epochs=args.steps // args.epoch_steps,
    verbose=0,
    callbacks=[Snap()],
)
result["total_seconds"] = round(time.time() - T0, 1)
save()
print(f"[{args.name}] done in {time.time() - T0:.1f}s", flush=True)
