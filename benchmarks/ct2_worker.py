"""CTranslate2 for the decoding benchmarks: which GEMM library each compute type runs fastest
with here, and a `Translator` in a worker process of its own (CTranslate2 reads `CT2_USE_MKL`
once per process, and float32 and int8 are each fastest with a different library).

Usage (started by `Ct2Worker`; one JSON request per stdin line, one reply per stdout line):
    python -m benchmarks.ct2_worker CT2_DIR --compute-type int8 --beam-size 4 --threads 2

Example:
    >>> parse_ct2("float32:mkl,int8:dnnl")  # doctest: +SKIP
    [('float32', 'mkl'), ('int8', 'dnnl')]
"""

import argparse
import json
import os
import subprocess
import sys
import time

from benchmarks.common import child_environment, module_command

CT2_DEFAULT = "float32:mkl,int8:dnnl,int8_bfloat16:dnnl"


def parse_ct2(text):
    """`[(quantization, library), ...]` from "float32:mkl,int8:dnnl"."""
    from keras_transformer.export.ctranslate2 import QUANTIZATIONS

    sides = []
    for item in filter(None, text.split(",")):
        quantization, _, library = item.partition(":")
        if quantization not in QUANTIZATIONS or library not in ("mkl", "dnnl"):
            raise SystemExit(
                f"--ct2: {item!r} is not QUANTIZATION:LIBRARY with a quantization of "
                f"{', '.join(QUANTIZATIONS)} and a library of mkl, dnnl"
            )
        sides.append((quantization, library))
    return sides


def ct2_library(compute_type):
    """ "mkl" or "dnnl": the GEMM library CTranslate2 runs `compute_type` fastest with here
    (decode_precision's defaults, measured on an AMD Zen 4 CPU); `CT2_LIBRARY_<TYPE>` (e.g.
    `CT2_LIBRARY_INT8=mkl`) overrides it."""
    fastest = dict(parse_ct2(CT2_DEFAULT))
    return os.environ.get(f"CT2_LIBRARY_{compute_type.upper()}", fastest.get(compute_type, "mkl"))


class Ct2Worker:
    """A CTranslate2 `Translator` in its own process: CTranslate2 reads `CT2_USE_MKL` once per
    process, and float32 and int8 are each fastest with a different library. `translate`
    sends one batch of pieces as a JSON line and returns `(hypotheses, seconds of the
    worker's translate_batch)`; `exchange_seconds` is that call's wall time."""

    def __init__(self, directory, compute_type, library, beam_size, threads, length_penalty):
        environment = child_environment()
        environment["CT2_USE_MKL"] = "1" if library == "mkl" else "0"
        environment["OMP_NUM_THREADS"] = str(threads)
        self.library = library
        self.process = subprocess.Popen(
            module_command(
                "benchmarks.ct2_worker",
                directory,
                "--compute-type",
                compute_type,
                "--beam-size",
                beam_size,
                "--threads",
                threads,
                "--length-penalty",
                length_penalty,
            ),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=environment,
        )
        ready = self.process.stdout.readline().split()
        if ready[:1] != ["ready"]:
            raise RuntimeError(f"the CTranslate2 worker for {compute_type} did not start")
        self.compute_type = ready[1]

    def translate(self, sources, batch_size, cap):
        start = time.perf_counter()
        request = dict(sources=sources, max_batch_size=batch_size, max_decoding_length=cap)
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        reply = json.loads(self.process.stdout.readline())
        self.exchange_seconds = time.perf_counter() - start
        return reply["hypotheses"], reply["seconds"]

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=60)


def serve(directory, compute_type, beam_size, threads, length_penalty):
    """The worker's loop: one JSON request per stdin line, one JSON reply per stdout line."""
    import ctranslate2

    translator = ctranslate2.Translator(
        directory,
        device="cpu",
        compute_type=compute_type,
        intra_threads=threads,
        inter_threads=1,
    )
    print(f"ready {translator.compute_type}", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        start = time.perf_counter()
        results = translator.translate_batch(
            request["sources"],
            max_batch_size=request["max_batch_size"],
            beam_size=beam_size,
            length_penalty=length_penalty,
            max_decoding_length=request["max_decoding_length"],
            min_decoding_length=0,
            return_scores=False,
        )
        seconds = time.perf_counter() - start
        hypotheses = [r.hypotheses[0] for r in results]
        print(json.dumps(dict(hypotheses=hypotheses, seconds=seconds)), flush=True)
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", help="a CTranslate2 model directory")
    parser.add_argument("--compute-type", required=True)
    parser.add_argument("--beam-size", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--length-penalty", type=float, default=0.0)
    args = parser.parse_args(argv)
    return serve(
        args.directory, args.compute_type, args.beam_size, args.threads, args.length_penalty
    )


if __name__ == "__main__":
    sys.exit(main())
