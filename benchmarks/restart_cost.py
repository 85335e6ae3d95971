"""Restart cost of the data position on the Multi30k recipe: skipping consumed batches against
restoring the checkpointed tf.data iterator.

A resumed run must continue with the batch the interrupted run would have drawn next. Before
the iterator was checkpointed, `train` rebuilt the pipeline and skipped the micro-batches
already trained on (`Dataset.skip`), which reads, tokenizes and buckets every one of them
again: at step 8000 of `pipelines/multi30k.py` (2 micro-batches of 4096 tokens per update)
that is 16000 batches. Now a one-replica run restores the iterator (shuffle buffer, shuffle
RNG, partly filled buckets) from the checkpoint instead.

This script measures, on the real Multi30k train data with the recipe's pipeline settings
(10000-piece BPE, token budget 4096, max_length 128, shuffle buffer 30000, seed 1):

- the skip rate (batches/s) over `--skip-batches` batches, and the time it implies for the
  16000 batches of step 8000;
- the iterator's checkpoint: its size, the time to save it after `--updates` updates, and the
  time to restore it into a new iterator and draw the next update (checked to be the same
  update the original iterator gives next). The restored state is the shuffle buffer and the
  buckets, whose size does not grow with the step, so this time holds at step 8000 too;
- the pipeline's start-up report (one tokenizing pass, paid by every start, fresh or resumed).

Command:

    KT_DATA_DIR=../shared/data .venv/bin/python benchmarks/restart_cost.py

It ends with one JSON line.
"""

import argparse
import json
import os
import platform
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer import data  # noqa: E402
from keras_transformer.training import group_micro_batches  # noqa: E402

RECIPE_STEPS = 8000
MICRO_BATCHES = 2  # 8192 tokens per update in micro-batches of 4096


def _pipeline(directory, vocabulary):
    corpora = [
        data.TextPairCorpus(
            os.path.join(directory, "train.en.gz"), os.path.join(directory, "train.de.gz")
        )
    ]
    return data.TranslationPipeline(
        corpora,
        vocabulary,
        token_budget=4096,
        max_length=128,
        num_replicas=1,
        shuffle_buffer=30_000,
        log_report=False,
    )


def _updates(pipeline):
    batches = pipeline.dataset(seed=1, shuffle=True, repeat=True)
    return group_micro_batches(batches, MICRO_BATCHES).prefetch(tf.data.AUTOTUNE)


def _same(update_a, update_b):
    flat_a, flat_b = tf.nest.flatten(update_a), tf.nest.flatten(update_b)
    return len(flat_a) == len(flat_b) and all(
        a.shape == b.shape and np.array_equal(a.numpy(), b.numpy()) for a, b in zip(flat_a, flat_b)
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data-dir",
        default=os.path.join(os.environ.get("KT_DATA_DIR", "../shared/data"), "multi30k"),
    )
    parser.add_argument("--skip-batches", type=int, default=2000)
    parser.add_argument("--updates", type=int, default=150)
    parser.add_argument(
        "--work-dir", default=os.path.join(tempfile.gettempdir(), "kt_restart_cost")
    )
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)

    prefix = os.path.join(args.work_dir, "vocab")
    corpora = [
        data.TextPairCorpus(
            os.path.join(args.data_dir, "train.en.gz"), os.path.join(args.data_dir, "train.de.gz")
        )
    ]
    if not os.path.exists(prefix + ".model"):
        data.train_vocabulary(corpora, prefix, vocab_size=10000, model_type="bpe", seed=1)
    vocabulary = data.SubwordVocabulary.from_file(prefix + ".model")

    pipeline = _pipeline(args.data_dir, vocabulary)
    started = time.perf_counter()
    report = pipeline.report()
    report_s = time.perf_counter() - started

    batches = pipeline.dataset(seed=1, shuffle=True, repeat=True)
    started = time.perf_counter()
    next(iter(batches.skip(args.skip_batches)))
    skip_s = time.perf_counter() - started
    skip_rate = args.skip_batches / skip_s
    step_8000_skip_s = RECIPE_STEPS * MICRO_BATCHES / skip_rate

    iterator = iter(_updates(pipeline))
    for _ in range(args.updates):
        next(iterator)
    checkpoint_prefix = os.path.join(args.work_dir, "iterator")
    started = time.perf_counter()
    path = tf.train.Checkpoint(data_iterator=iterator).write(checkpoint_prefix)
    save_s = time.perf_counter() - started
    size = sum(
        os.path.getsize(os.path.join(args.work_dir, name))
        for name in os.listdir(args.work_dir)
        if name.startswith("iterator")
    )
    expected = next(iterator)

    restored = iter(_updates(_pipeline(args.data_dir, vocabulary)))
    started = time.perf_counter()
    tf.train.Checkpoint(data_iterator=restored).read(path).assert_consumed()
    first = next(restored)
    restore_s = time.perf_counter() - started
    exact = _same(first, expected)

    print(
        f"Multi30k train: {report.pairs_kept} pairs, {report.batches_per_epoch} batches of "
        f"4096 tokens per epoch; {RECIPE_STEPS} updates = "
        f"{RECIPE_STEPS * MICRO_BATCHES} batches"
    )
    print("| what | seconds | note |")
    print("|---|---|---|")
    print(f"| pipeline report at start-up | {report_s:.1f} | every start pays it |")
    print(f"| skip {args.skip_batches} batches | {skip_s:.1f} | {skip_rate:.1f} batches/s |")
    print(
        f"| skip to step {RECIPE_STEPS} (estimate) | {step_8000_skip_s:.0f} | "
        f"{RECIPE_STEPS * MICRO_BATCHES} batches at the rate above |"
    )
    print(
        f"| save the iterator after {args.updates} updates | {save_s:.2f} | "
        f"{size / 2**20:.1f} MiB |"
    )
    print(f"| restore it and draw the next update | {restore_s:.2f} | same update: {exact} |")
    print(
        json.dumps(
            {
                "benchmark": "restart_cost",
                "machine": f"{os.cpu_count()}-core {platform.machine()}",
                "load_average_1min": round(os.getloadavg()[0], 2),
                "batches_per_epoch": report.batches_per_epoch,
                "report_s": round(report_s, 2),
                "skip_batches": args.skip_batches,
                "skip_s": round(skip_s, 1),
                "skip_batches_per_s": round(skip_rate, 2),
                "step_8000_skip_s_estimate": round(step_8000_skip_s),
                "iterator_checkpoint_mib": round(size / 2**20, 2),
                "iterator_save_s": round(save_s, 3),
                "iterator_restore_s": round(restore_s, 3),
                "restored_update_is_exact": exact,
            }
        )
    )


if __name__ == "__main__":
    main()
