"""What a resume by replay costs: re-reading the data stream up to the checkpoint.

Under MultiWorkerMirroredStrategy (and from a checkpoint written without the data position)
the data iterator is not in the checkpoint, so a restarted run rebuilds the stream from its
seed and skips the global batches already trained on (`keras_transformer.training.trainer`);
one-host strategies restore theirs (`keras_transformer.training.distributed_feed`). Skipping still reads, tokenizes,
shuffles and buckets every one of them. This measures the seconds per skipped global batch
for the shape of the base recipe on 8 replicas (configs/wmt14_en_de_base.yaml: 3125 tokens
per replica, one global batch of about 25000 tokens per update) on real WMT text, and
extrapolates to a restart at update 100000 (the recipe's last).

Usage (from the repository root):
    KT_DATA_DIR=../shared/data python -m benchmarks.resume_replay
    python -m benchmarks.resume_replay --skip 400 --replicas 8 --token-budget 3125
"""

import argparse
import json
import os
import tempfile
import time

from benchmarks.common import machine_line, machine_record


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=os.environ.get("KT_DATA_DIR", "../shared/data"))
    parser.add_argument("--skip", type=int, default=400, help="global batches skipped (timed)")
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--token-budget", type=int, default=3125, help="tokens per replica")
    parser.add_argument("--vocab-size", type=int, default=16000)
    parser.add_argument("--updates", type=int, default=100_000, help="extrapolate to this step")
    return parser.parse_args(argv)


def first_batch_seconds(pipeline, skip):
    """Seconds until the first batch after skipping `skip`, as a restart's `fit` waits."""
    started = time.perf_counter()
    dataset = pipeline.dataset(seed=1, shuffle=True, repeat=True).skip(skip)
    next(iter(dataset))
    return time.perf_counter() - started


def main(argv=None):
    args = parse_args(argv)
    from keras_transformer.data import TextPairCorpus, TranslationPipeline, train_vocabulary

    base = os.path.join(args.data_dir, "wmt_extra", "newstest_extra.en-de")
    corpus = TextPairCorpus(base + ".en", base + ".de")
    with tempfile.TemporaryDirectory() as directory:
        vocabulary = train_vocabulary(
            [corpus], os.path.join(directory, "v"), vocab_size=args.vocab_size
        )
    pipeline = TranslationPipeline(
        [corpus],
        vocabulary,
        token_budget=args.token_budget,
        max_length=256,
        num_replicas=args.replicas,
        log_report=False,
    )
    start = first_batch_seconds(pipeline, 0)
    skipped = first_batch_seconds(pipeline, args.skip)
    per_batch = (skipped - start) / args.skip
    record = {
        "benchmark": "resume_replay",
        **machine_record(),
        "replicas": args.replicas,
        "token_budget_per_replica": args.token_budget,
        "skipped_global_batches": args.skip,
        "seconds_per_skipped_batch": round(per_batch, 4),
        "first_batch_s": round(start, 2),
        f"replay_hours_at_{args.updates}": round(per_batch * args.updates / 3600, 2),
    }
    print(machine_line(record))
    print(
        f"replaying {args.skip} global batches of {args.replicas} x {args.token_budget} "
        f"tokens: {skipped - start:.1f} s ({per_batch * 1000:.0f} ms each); a restart at "
        f"update {args.updates} would replay for {per_batch * args.updates / 3600:.1f} h"
    )
    print(json.dumps(record))


if __name__ == "__main__":
    main()
