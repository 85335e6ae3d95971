"""EVALB F1 of `train.py`'s dev parses (its JSON files), as the pipeline scores its own.

    python benchmarks/parsing_gpu/score.py RUN_DIR GOLD_TREES NAME.json...

RUN_DIR: the run folder `prep.py` read (its vocabulary and dev words); GOLD_TREES: a
`dev.gold.trees` written by the pipeline (the preprocessed `wsj_sample.dev`).
"""

import json
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "pipelines"))
from ptb_parsing import score_parses  # noqa: E402

from keras_transformer.data.vocabulary import SubwordVocabulary  # noqa: E402
from keras_transformer.parsing.linearization import Linearizer  # noqa: E402
from keras_transformer.parsing.trees import merge_same_label_unaries, read_trees  # noqa: E402

run, gold_path = sys.argv[1], sys.argv[2]
vocab = SubwordVocabulary.from_file(f"{run}/data/parsing_vocab.model")
words = [line.split() for line in open(f"{run}/data/wsj.dev.words").read().splitlines()]
gold_all = read_trees(gold_path)
lin = Linearizer(word_slots=True)
for path in sys.argv[3:]:
    result = json.load(open(path))
    log = [e for e in result["log"] if "step" in e]
    print(
        path,
        "steps",
        log[-1]["step"] if log else None,
        "last 500:",
        log[-1]["seconds_500"] if log else None,
        "s; loss",
        log[-1]["loss"] if log else None,
    )
    for tag, outputs in result["decodes"].items():
        n = len(outputs)
        parsed = []
        repaired = 0
        for ids, w in zip(outputs, words[:n]):
            d = lin.delinearize(vocab.decode(ids), w)
            repaired += d.repaired
            parsed.append(merge_same_label_unaries(d.tree))
        report, _, _ = score_parses(gold_all[:n], parsed)
        a = report.all
        print(
            f"  {result['args']['name']:12s} {tag:12s} F1 {a.f1:6.2f}  P {a.precision:6.2f} "
            f"R {a.recall:6.2f}  CM {a.complete_match:5.2f}  repaired {repaired}  n={n}"
        )
