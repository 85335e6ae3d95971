"""Token ids of a parsing run's data, for `train.py` on a GPU machine without TensorFlow.

Reads a run folder of `pipelines/ptb_parsing.py` (its `data/` and `config.json`: run the
pipeline for a few updates to make one) and writes OUT.npz (train pairs per corpus, dev
sources; source + eos, target without bos/eos, as the tf.data pipeline) and OUT.json (the
model config and the vocabulary's pieces, for the tree constraint).

    python benchmarks/parsing_gpu/prep.py RUN_DIR runs/parsing_gpu/wsjgum
"""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from keras_transformer.data.vocabulary import SubwordVocabulary  # noqa: E402

run, out = sys.argv[1], sys.argv[2]
os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
vocab = SubwordVocabulary.from_file(f"{run}/data/parsing_vocab.model")
config = json.load(open(f"{run}/config.json"))
arrays = {}
for corpus in ("wsj", "gum"):
    try:
        words = open(f"{run}/data/{corpus}.train.words").read().splitlines()
    except FileNotFoundError:
        continue
    trees = open(f"{run}/data/{corpus}.train.trees.lin").read().splitlines()
    src = [vocab.encode(w) + [3] for w in words]
    tgt = [vocab.encode(t) for t in trees]
    keep = [i for i in range(len(src)) if len(src[i]) < 1000 and len(tgt[i]) < 1000]
    src = [src[i] for i in keep]
    tgt = [tgt[i] for i in keep]
    for name, seqs in (("src", src), ("tgt", tgt)):
        arrays[f"{corpus}_{name}"] = np.concatenate([np.asarray(s, np.int32) for s in seqs])
        arrays[f"{corpus}_{name}_len"] = np.asarray([len(s) for s in seqs], np.int32)
    print(
        corpus,
        len(src),
        "pairs; target pieces mean",
        np.mean([len(t) for t in tgt]),
        "max",
        max(len(t) for t in tgt),
    )
dev_words = open(f"{run}/data/wsj.dev.words").read().splitlines()
dev = [vocab.encode(w) + [3] for w in dev_words]
arrays["dev_src"] = np.concatenate([np.asarray(s, np.int32) for s in dev])
arrays["dev_src_len"] = np.asarray([len(s) for s in dev], np.int32)
np.savez_compressed(out + ".npz", **arrays)
pieces = [vocab.processor.id_to_piece(i) for i in range(vocab.processor.get_piece_size())]
json.dump({"config": config, "pieces": pieces}, open(out + ".json", "w"))
print("wrote", out + ".npz", out + ".json")
