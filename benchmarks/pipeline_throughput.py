"""How fast the tf.data pipeline delivers token-budget batches, against what training consumes.

Measures, on the real data of ../shared/data (KT_DATA_DIR):

- the time to train the shared SentencePiece vocabulary on multi30k + wmt_extra (EN-DE);
- for multi30k train and wmt_extra EN-DE: one epoch through the pipeline (read, tokenize,
  filter, bucket, batch), its tokens/s (real source + target tokens, padding not counted),
  pairs/s and padding fraction, at the given token budget;
- the train step's token rate for the small config (d_model 256, d_ff 1024, h 4, N 3) on the
  same batches with `model.fit`;

then the ratio pipeline / train step (target: >= 10, so the pipeline is never the bottleneck).
Prints a table, and last one JSON line with the headline figures.

Usage (from the repository root):
    KT_DATA_DIR=../shared/data python -m benchmarks.pipeline_throughput
    python -m benchmarks.pipeline_throughput --token-budget 4096 --train-steps 20
"""

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf

from benchmarks.common import machine_line, machine_record


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=os.environ.get("KT_DATA_DIR", "../shared/data"))
    parser.add_argument(
        "--token-budget",
        type=int,
        default=4096,
        help="tokens per batch per side, padding included (default 4096)",
    )
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--vocab-size", type=int, default=16000)
    parser.add_argument(
        "--train-steps",
        type=int,
        default=20,
        help="timed train steps of the small config (0: skip)",
    )
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv)


def time_epoch(pipeline, seed):
    """One epoch: (seconds, real tokens, padded tokens, pairs, batches)."""
    real = padded = pairs = batches = 0
    started = time.perf_counter()
    for inputs, labels in pipeline.dataset(seed=seed).as_numpy_iterator():
        source = inputs["source_ids"]
        real += np.count_nonzero(source) + np.count_nonzero(labels)
        padded += source.size + labels.size
        pairs += labels.shape[0]
        batches += 1
    return time.perf_counter() - started, real, padded, pairs, batches


def time_train_steps(vocabulary, pipeline, steps, seed):
    """Real tokens (source + target) per second that `fit` consumes for the small config."""
    import keras

    import keras_transformer

    keras.utils.set_random_seed(seed)
    config = keras_transformer.TransformerConfig(
        vocab_size=vocabulary.size, num_layers=3, d_model=256, d_ff=1024, num_heads=4
    )
    model = keras_transformer.build_model(config)
    model.compile(
        optimizer=keras_transformer.build_optimizer(config.d_model),
        loss=keras_transformer.LabelSmoothedCrossEntropy(config.label_smoothing),
    )
    # Batches held in memory, so that only the train step is timed.
    batches = list(pipeline.dataset(seed=seed, repeat=True).take(steps * 2))
    warmup = tf.data.Dataset.from_generator(
        lambda: iter(batches[:steps]), output_signature=pipeline.dataset().element_spec
    )
    timed = tf.data.Dataset.from_generator(
        lambda: iter(batches[steps:]), output_signature=pipeline.dataset().element_spec
    )
    # The first steps trace (and retrace for new shapes); time the later ones.
    model.fit(warmup, epochs=1, verbose=0)
    started = time.perf_counter()
    model.fit(timed, epochs=1, verbose=0)
    seconds = time.perf_counter() - started
    tokens = sum(
        int(tf.math.count_nonzero(inputs["source_ids"])) + int(tf.math.count_nonzero(labels))
        for inputs, labels in batches[steps:]
    )
    return tokens / seconds, seconds / steps


def main(argv=None):
    args = parse_args(argv)
    from keras_transformer.data import TextPairCorpus, TranslationPipeline, train_vocabulary

    data = pathlib.Path(args.data_dir)
    if not (data / "multi30k" / "train.en.gz").is_file():
        sys.exit(f"no data at {data}: set KT_DATA_DIR or --data-dir to ../shared/data")
    corpora = {
        "multi30k": TextPairCorpus(data / "multi30k/train.en.gz", data / "multi30k/train.de.gz"),
        "wmt_extra": TextPairCorpus(
            data / "wmt_extra/newstest_extra.en-de.en", data / "wmt_extra/newstest_extra.en-de.de"
        ),
    }
    with tempfile.TemporaryDirectory() as directory:
        started = time.perf_counter()
        vocabulary = train_vocabulary(
            list(corpora.values()),
            os.path.join(directory, "ende"),
            vocab_size=args.vocab_size,
            model_type="bpe",
            seed=args.seed,
        )
        vocab_seconds = time.perf_counter() - started

    rows = []
    for name, corpus in corpora.items():
        pipeline = TranslationPipeline(
            corpus, vocabulary, token_budget=args.token_budget, max_length=args.max_length
        )
        report = pipeline.report()
        cold = time_epoch(pipeline, args.seed)
        warm = time_epoch(pipeline, args.seed + 1)
        seconds, real, padded, pairs, batches = warm
        rows.append(
            {
                "corpus": name,
                "pairs": pairs,
                "dropped": report.pairs_read - report.pairs_kept,
                "batches": batches,
                "seconds": seconds,
                "first_epoch_seconds": cold[0],
                "tokens_per_s": real / seconds,
                "pairs_per_s": pairs / seconds,
                "padding": 1 - real / padded,
            }
        )

    train_rate = step_seconds = None
    if args.train_steps:
        pipeline = TranslationPipeline(
            corpora["multi30k"],
            vocabulary,
            token_budget=args.token_budget,
            max_length=args.max_length,
        )
        train_rate, step_seconds = time_train_steps(
            vocabulary, pipeline, args.train_steps, args.seed
        )

    print(
        f"vocabulary: BPE {vocabulary.size} pieces on multi30k + wmt_extra EN-DE "
        f"({sum(c.check().num_pairs for c in corpora.values())} pairs) in {vocab_seconds:.1f} s"
    )
    machine = machine_record()
    print(machine_line(machine))
    print(f"token budget {args.token_budget} per side, max_length {args.max_length}")
    header = (
        f"{'corpus':<10} {'pairs':>7} {'dropped':>7} {'batches':>7} {'epoch s':>8} "
        f"{'tokens/s':>10} {'pairs/s':>9} {'padding':>8}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        print(
            f"{row['corpus']:<10} {row['pairs']:>7} {row['dropped']:>7} {row['batches']:>7} "
            f"{row['seconds']:>8.2f} {row['tokens_per_s']:>10.0f} {row['pairs_per_s']:>9.0f} "
            f"{row['padding']:>8.1%}"
        )
    if train_rate:
        print(
            f"train step, small config (N=3, d_model=256, d_ff=1024, h=4): "
            f"{train_rate:.0f} tokens/s ({step_seconds:.2f} s/step)"
        )
        for row in rows:
            print(
                f"pipeline / train step on {row['corpus']}: "
                f"{row['tokens_per_s'] / train_rate:.1f}x (target >= 10x)"
            )
    headline = {
        "benchmark": "pipeline_throughput",
        **machine,
        "token_budget": args.token_budget,
        "vocab_size": vocabulary.size,
        "vocab_train_s": round(vocab_seconds, 2),
        **{f"{row['corpus']}_tokens_per_s": round(row["tokens_per_s"]) for row in rows},
        **{f"{row['corpus']}_padding": round(row["padding"], 4) for row in rows},
        "train_small_tokens_per_s": round(train_rate) if train_rate else None,
        "min_pipeline_over_train": (
            round(min(row["tokens_per_s"] for row in rows) / train_rate, 1) if train_rate else None
        ),
    }
    print(json.dumps(headline))
    return 0


if __name__ == "__main__":
    sys.exit(main())
