"""Decoding throughput: beam search on CPU, ours against the peers, on the same weights.

Measures generated target tokens/s and sentences/s at beam 4, batch 32, source length 25, with
the output length forced (eos forbidden before it, hypotheses cut at it) so that untrained
weights give comparable runs. Beside our compiled decoder (`tf.function` over the
`keras.ops.while_loop` beam search with its key/value cache), in the same process and on the
same weights:

- ours without the cache: every step re-runs the decoder over the whole (fixed-size) prefix;
- keras-hub's `BeamSampler` driving the same model's cached `decode_step` (no length
  penalty, and it gathers every cache, the encoder-decoder ones included, at each step);
- CTranslate2, with the `TransformerSpec` that `keras_transformer.export.ctranslate2` builds
  from our weights (pad and bos kept out of its outputs, as ours), forced to the same length
  with min/max decoding lengths.

Also decodes at 25, 50, 100 and 200 tokens to show how our cost grows with the output length.
Ends with one JSON line of every figure. A peer that is not installed is skipped with one line
and listed under "skipped_peers" in the JSON (`pip install -e ".[bench]"` installs every peer).

Threads: `DECODE_THREADS` (default 2) for TensorFlow's intra-op pool and CTranslate2 alike.

`--trained RUN --source-file F` decodes real sentences with a trained model instead: ours
(fp32 at alpha 0 and 0.6, bf16 where the CPU has AVX512-BF16 or AMX, and at batch size 1
with `jit_compile=True`, XLA), its SavedModel, and
CTranslate2 fp32 and int8, each CTranslate2 precision in its own worker process on the GEMM
library fastest for it (benchmarks/README.md has the protocol and the JSON fields).

Usage (from the repository root):
    python -m benchmarks.decode_throughput                      # small and base, all peers
    python -m benchmarks.decode_throughput --configs small --repeats 1 --peers ours,ct2
"""

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

from benchmarks.common import (
    best_seconds,
    importable_peers,
    machine_line,
    machine_record,
    set_tensorflow_threads,
    source_commit,
)
from benchmarks.decode_peers import (
    THREADS,
    build,
    ctranslate2_agrees_with_ours,
    ctranslate2_model,
    ctranslate2_runner,
    keras_hub_beam_sampler,
    ours,
    ours_without_cache,
    random_sources,
)
from benchmarks.decode_trained import (
    CT2_COMPUTE_TYPES,
    OUR_PRECISIONS,
    PREPROCESSING,
    trained_model_throughput,
)

PEERS = ("ours", "nocache", "kerashub", "ct2", "savedmodel")
PEER_MODULES = {"kerashub": "keras_hub", "ct2": "ctranslate2"}


# -- timing ----------------------------------------------------------------------------------


def set_thread_environment():
    """Run before TensorFlow and CTranslate2 are imported: both read these at start-up."""
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
    # CTranslate2 uses MKL only on Intel CPUs unless told otherwise; on AMD its default DNNL
    # SGEMM was 4-8x slower here. Compare with CTranslate2 at its best.
    os.environ.setdefault("CT2_USE_MKL", "1")


def wait_for(out):
    if isinstance(out, tuple):  # our compiled search: tensors that may still be computing
        np.asarray(out[0])


def time_it(run, sources, repeats):
    """`(best seconds of `repeats` runs, seconds of the first run)`: the first compiles."""
    start = time.perf_counter()
    wait_for(run(sources))
    first = time.perf_counter() - start
    return best_seconds(lambda: run(sources), repeats=repeats, warmup=0, wait=wait_for), first


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--configs",
        default=None,
        help="random-weight configs to time (default: small,base; none with --trained)",
    )
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--source-length", type=int, default=25)
    parser.add_argument("--lengths", default="25,50")
    parser.add_argument(
        "--scaling-lengths",
        default=None,
        help="output lengths for our cost-vs-length check (small config; default "
        "25,50,100,200, none with --trained)",
    )
    parser.add_argument(
        "--nocache-configs",
        default="small",
        help="configs on which to time the no-cache decoder (it is slow)",
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--trained",
        metavar="RUN",
        help="decode --source-file with this trained model (a training output_dir or "
        ".keras file): ours, its SavedModel and CTranslate2 on the same weights",
    )
    parser.add_argument(
        "--trained-batch-sizes",
        default="1,32",
        help="batch sizes of the --trained rows (1: latency, sentence by sentence)",
    )
    parser.add_argument(
        "--precisions",
        default="fp32,int8,bf16",
        help="precisions of the --trained rows: CTranslate2's compute type where it has it "
        f"({','.join(CT2_COMPUTE_TYPES)}), and ours where the library has it "
        f"({','.join(OUR_PRECISIONS)}; bf16 on a CPU with AVX512-BF16 or AMX)",
    )
    parser.add_argument(
        "--saved-model",
        metavar="DIR",
        help="for --trained: an existing SavedModel export of the same model (default: "
        "export one into a temporary folder, beam 4, alpha 0)",
    )
    parser.add_argument(
        "--preprocess",
        choices=PREPROCESSING,
        default="none",
        help="prepare --source-file as the model's training text was (lowercase+moses: "
        "Multi30k as pipelines/multi30k.py prepares it)",
    )
    parser.add_argument(
        "--source-file",
        default=None,
        help="real sentences for --trained (default: $KT_DATA_DIR/wmt/newstest2013.en)",
    )
    parser.add_argument(
        "--lines",
        type=int,
        default=500,
        help="first lines of --source-file to translate (default: 500)",
    )
    args = parser.parse_args(argv)
    if args.configs is None:
        args.configs = "" if args.trained else "small,base"
    if args.scaling_lengths is None:
        args.scaling_lengths = "" if args.trained else "25,50,100,200"
    unknown = [peer for peer in args.peers.split(",") if peer not in PEERS]
    if unknown:  # a misspelt peer would otherwise be run by no branch, without a word
        parser.error(f"--peers: unknown {', '.join(unknown)}; choose from {','.join(PEERS)}")

    set_thread_environment()

    set_tensorflow_threads(THREADS, inter=1)
    peers, skipped_peers = importable_peers(args.peers.split(","), PEER_MODULES)
    lengths = [int(x) for x in args.lengths.split(",")]
    results, agreement = [], {}
    machine = machine_record(["tensorflow", "keras", *PEER_MODULES.values()])
    commit = source_commit()  # at the start: what this process imported
    print(machine_line(machine, THREADS))
    if args.configs:
        print(
            f"# beam {args.beam_size}, batch {args.batch_size}, source length "
            f"{args.source_length}, vocab {args.vocab_size}, fp32; best of {args.repeats} "
            "runs after one that compiles",
            flush=True,
        )
        print(
            f"{'config':6} {'decoder':22} {'out len':>7} {'tokens/s':>9} {'sent/s':>7} "
            f"{'x ct2':>6} {'warmup s':>8}"
        )
    for name in filter(None, args.configs.split(",")):
        model = build(name, args.vocab_size)
        sources = random_sources(args.batch_size, args.source_length, args.vocab_size)
        ct2 = None
        if "ct2" in peers:
            directory = tempfile.mkdtemp(prefix=f"ct2-{name}-")
            ct2 = ctranslate2_model(model, directory)
            agreement[name] = ctranslate2_agrees_with_ours(model, *ct2, sources)
            print(
                f"# {name}: CTranslate2 greedy tokens equal to ours: {agreement[name]:.0%} "
                "(100%: the conversion is faithful)",
                flush=True,
            )
        for length in lengths:
            runners = {}
            if "ours" in peers:
                runners["ours (tf.function)"] = ours(
                    model, args.beam_size, length, args.source_length
                )
            if "nocache" in peers and name in args.nocache_configs.split(","):
                runners["ours without cache"] = ours_without_cache(
                    model, args.beam_size, length, args.source_length
                )
            if "kerashub" in peers:
                runners["keras-hub BeamSampler"] = keras_hub_beam_sampler(
                    model, args.beam_size, length, args.source_length
                )
            if ct2 is not None:
                runners["CTranslate2"] = ctranslate2_runner(*ct2, args.beam_size, length)
            rows = {}
            for label, run in runners.items():
                seconds, warmup = time_it(run, sources, args.repeats)
                rows[label] = dict(
                    config=name,
                    decoder=label,
                    output_length=length,
                    seconds=round(seconds, 3),
                    warmup_seconds=round(warmup, 2),
                    tokens_per_second=round(args.batch_size * length / seconds, 1),
                    sentences_per_second=round(args.batch_size / seconds, 2),
                )
            reference = rows.get("CTranslate2")
            for row in rows.values():
                if reference:
                    row["vs_ctranslate2"] = round(
                        row["tokens_per_second"] / reference["tokens_per_second"], 3
                    )
                print(
                    f"{row['config']:6} {row['decoder']:22} {length:>7} "
                    f"{row['tokens_per_second']:>9.1f} {row['sentences_per_second']:>7.2f} "
                    f"{row.get('vs_ctranslate2', float('nan')):>6.2f} "
                    f"{row['warmup_seconds']:>8.1f}",
                    flush=True,
                )
                results.append(row)
    scaling = []
    if args.scaling_lengths and "ours" in peers:
        model = build("small", args.vocab_size)
        sources = random_sources(args.batch_size, args.source_length, args.vocab_size)
        ct2 = None
        if "ct2" in peers:
            ct2 = ctranslate2_model(model, tempfile.mkdtemp(prefix="ct2-scaling-"))
        print("# cost against output length (small): milliseconds per generated token")
        for length in [int(x) for x in args.scaling_lengths.split(",")]:
            runners = {"ours": ours(model, args.beam_size, length, args.source_length)}
            if ct2 is not None:
                runners["CTranslate2"] = ctranslate2_runner(*ct2, args.beam_size, length)
            for label, run in runners.items():
                seconds, _ = time_it(run, sources, 1)
                per_token = seconds / (args.batch_size * length)
                scaling.append(
                    dict(
                        decoder=label,
                        output_length=length,
                        seconds=round(seconds, 3),
                        ms_per_token=round(1000 * per_token, 3),
                    )
                )
                print(
                    f"small  {label:22} {length:>7} {seconds:>8.2f} s  "
                    f"{1000 * per_token:.3f} ms/token",
                    flush=True,
                )
    trained = trained_model_throughput(args, peers) if args.trained else None
    print(
        json.dumps(
            {
                "benchmark": "decode_throughput",
                **machine,
                "commit": commit,
                "threads": THREADS,
                "batch_size": args.batch_size,
                "beam_size": args.beam_size,
                "source_length": args.source_length,
                "vocab_size": args.vocab_size,
                "ct2_greedy_agreement": agreement,
                "results": results,
                "scaling": scaling,
                "trained": trained,
                "skipped_peers": skipped_peers,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
