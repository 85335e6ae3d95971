"""CPU time of `Translator.translate` on real sentences: the search's cost at one commit.

Translates `--source-file` once to compile every batch shape, then `--repeats` more times,
and prints the best CPU time (process time, so another job on the machine's other core
counts less than in wall time), the best wall time, and an md5 of the translations: run it
at two commits (`git worktree add`) to set a decoding change against the code before it, and
the md5 says whether the outputs stayed the same. Threads: `DECODE_THREADS` (default 1).
Ends with one JSON line.

Usage (from the repository root):
    DECODE_THREADS=1 python -m benchmarks.micro.search_cpu_time \
        --trained runs/multi30k_en_de --source-file test2016.en --lines 256
"""

import hashlib
import json
import os
import time

from benchmarks.common import trained_search_parser

THREADS = int(os.environ.get("DECODE_THREADS", "1"))


def parse_args(argv=None):
    parser = trained_search_parser(__doc__.split("\n\n")[0], lines=256)
    parser.add_argument("--repeats", type=int, default=3)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
    from benchmarks.common import (
        best_seconds,
        machine_line,
        machine_record,
        set_tensorflow_threads,
    )

    set_tensorflow_threads(THREADS, THREADS)
    from keras_transformer import Translator

    with open(args.source_file, encoding="utf-8") as file:
        lines = [line.rstrip("\n") for _, line in zip(range(args.lines), file)]
    translator = Translator.load(
        args.trained, beam_size=args.beam_size, alpha=args.alpha, batch_size=args.batch_size
    )
    outputs = translator.translate(lines)  # compiles every batch shape
    cpu = best_seconds(
        lambda: translator.translate(lines), repeats=args.repeats, warmup=0, clock=time.process_time
    )
    wall = best_seconds(lambda: translator.translate(lines), repeats=args.repeats, warmup=0)
    digest = hashlib.md5("\n".join(outputs).encode("utf-8")).hexdigest()
    machine = machine_record()
    print(machine_line(machine, THREADS))
    print(f"# {len(lines)} lines: best CPU time {cpu:.3f} s, best wall {wall:.3f} s; md5 {digest}")
    print(
        json.dumps(
            {
                "benchmark": "search_cpu_time",
                "machine": machine,
                "threads": THREADS,
                "load": os.getloadavg()[0],
                "lines": len(lines),
                "beam_size": args.beam_size,
                "alpha": args.alpha,
                "batch_size": args.batch_size,
                "cpu_seconds": round(cpu, 3),
                "wall_seconds": round(wall, 3),
                "outputs_md5": digest,
            }
        )
    )


if __name__ == "__main__":
    main()
