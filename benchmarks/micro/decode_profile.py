"""Where a trained model's decoding time goes: `Translator.translate` under TensorFlow's
profiler, op time summed by the part of the search each op belongs to.

Translates `--source-file` once to compile every batch shape, then once more under
`tf.profiler.experimental` (beam `--beam-size`, alpha `--alpha`, batches of `--batch-size`,
`DECODE_THREADS` threads, 2 by default), and reads the host trace back: each kernel's time
goes to one of

- `encoder and cross-attention keys/values`: ops outside the decoding loop that encode the
  source and project it for the encoder-decoder attention;
- `step: matmuls`, `step: cache writes`, `step: other`: the decoder step inside the loop
  (products, `TensorScatterUpdate` of the new key/value, the rest: softmax, layer norm, ...);
- `beam: cache reorder`, `beam: top-k`, `beam: other`: the search's bookkeeping in the loop
  (`GatherV2` of the caches by parent beam, `TopKV2`, the rest);
- `between segments: cache growth` (`ConcatV2` outside the loop) and `outside: other`.

Times are summed over the threads that ran them (2 threads give up to twice the wall time).
Prints a table by part, then the `--top` op types that took most time (each with its part, its
kernel count and its mean microseconds per kernel: many short kernels are executor overhead,
few long ones are arithmetic), and last one JSON line. The profile is of TensorFlow's executor; XLA or
other backends are not covered.

Usage (from the repository root):
    python -m benchmarks.micro.decode_profile --trained runs/quickstart \
        --source-file runs/quickstart/corpus/test.en
"""

import collections
import glob
import json
import os
import tempfile
import time

from benchmarks.common import trained_search_parser

THREADS = int(os.environ.get("DECODE_THREADS", "2"))


def parse_args(argv=None):
    parser = trained_search_parser(__doc__.split("\n\n")[0], lines=500)
    parser.add_argument("--top", type=int, default=15, help="op types listed (default 15)")
    return parser.parse_args(argv)


def category(op_name, op_type):
    """The part of the search a kernel `op_name:op_type` of the host trace belongs to."""
    if "while/" not in op_name:  # later segments run inside a cond: cond/.../while/...
        if op_type == "ConcatV2":
            return "between segments: cache growth"
        if "encoder" in op_name or "Tensordot" in op_name:
            return "encoder and cross-attention keys/values"
        return "outside: other"
    if "MatMul" in op_type or "Einsum" in op_type:
        return "step: matmuls"  # the search's bookkeeping multiplies no matrices
    if "decoder" in op_name or "embedding" in op_name or op_type == "LogSoftmax":
        if op_type == "TensorScatterUpdate":
            return "step: cache writes"
        return "step: other"
    return {"GatherV2": "beam: cache reorder", "TopKV2": "beam: top-k"}.get(op_type, "beam: other")


def op_times(logdir):
    """`({category: ms}, {(category, op type): (ms, kernels)})` from the host trace the
    profiler wrote in `logdir`."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    path = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))[-1]
    space = xplane_pb2.XSpace()
    with open(path, "rb") as file:
        space.ParseFromString(file.read())
    totals, by_type = collections.Counter(), collections.defaultdict(lambda: [0.0, 0])
    for plane in space.planes:
        names = {key: value.name for key, value in plane.event_metadata.items()}
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            for event in line.events:
                name = names.get(event.metadata_id, "")
                if ":" not in name or "::" in name:  # executor bookkeeping, not a kernel
                    continue
                op_name, op_type = name.rsplit(":", 1)
                part, ms = category(op_name, op_type), event.duration_ps / 1e9
                totals[part] += ms
                by_type[part, op_type][0] += ms
                by_type[part, op_type][1] += 1
    return totals, {key: tuple(value) for key, value in by_type.items()}


def top_op_types(by_type, count):
    """The `count` op types that took most time: `[(part, op type, ms, kernels)]`."""
    rows = [(part, op_type, ms, kernels) for (part, op_type), (ms, kernels) in by_type.items()]
    return sorted(rows, key=lambda row: -row[2])[:count]


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
    import tensorflow as tf

    from benchmarks.common import machine_line, machine_record, set_tensorflow_threads
    from keras_transformer import Translator

    set_tensorflow_threads(THREADS, THREADS)
    with open(args.source_file, encoding="utf-8") as file:
        lines = [line.rstrip("\n") for _, line in zip(range(args.lines), file)]
    translator = Translator.load(
        args.trained, beam_size=args.beam_size, alpha=args.alpha, batch_size=args.batch_size
    )
    translator.translate(lines)  # compile every batch shape once
    start = time.perf_counter()
    translator.translate(lines)
    seconds = time.perf_counter() - start
    logdir = tempfile.mkdtemp(prefix="decode-profile-")
    tf.profiler.experimental.start(logdir)
    translator.translate(lines)
    tf.profiler.experimental.stop()
    totals, by_type = op_times(logdir)
    total, kernels = sum(totals.values()), sum(k for _, k in by_type.values())
    top = top_op_types(by_type, args.top)
    machine = machine_record()
    print(machine_line(machine, THREADS))
    print(f"# {len(lines)} lines, unprofiled pass {seconds:.2f} s; {kernels} kernels profiled")
    for name, ms in totals.most_common():
        print(f"{name:42} {ms:9.0f} ms {100 * ms / total:5.1f}%")
    print(f"# the {len(top)} op types that took most time")
    for part, op_type, ms, count in top:
        print(
            f"{op_type:24} {part:40} {ms:7.0f} ms {100 * ms / total:5.1f}% "
            f"{count:8d} kernels {1000 * ms / count:7.1f} us each"
        )
    print(
        json.dumps(
            {
                "benchmark": "decode_profile",
                "machine": machine,
                "load": os.getloadavg()[0],
                "lines": len(lines),
                "beam_size": args.beam_size,
                "alpha": args.alpha,
                "batch_size": args.batch_size,
                "seconds_unprofiled": round(seconds, 3),
                "kernels": kernels,
                "op_ms": {name: round(ms, 1) for name, ms in totals.most_common()},
                "op_share": {name: round(ms / total, 4) for name, ms in totals.most_common()},
                "top_op_types": [
                    {"op_type": op_type, "part": part, "ms": round(ms, 1), "kernels": count}
                    for part, op_type, ms, count in top
                ],
            }
        )
    )


if __name__ == "__main__":
    main()
