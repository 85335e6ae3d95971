"""Serving soak: an export loaded as TF Serving loads it, under 8 threads x 1000 requests.

The serving process imports only `tensorflow` and `tensorflow_text` (as the server links the
SentencePiece ops), loads the SavedModel with the TF1 session loader (the Python face of TF
Serving's C++ loader) and fills every input a request leaves out from the SignatureDef's
`defaults`, as TF Serving's `PreProcessPrediction` does. Then `--threads` threads each send
`--requests` requests to one shared session (TF Serving runs concurrent requests the same
way), each request drawing:

- a batch size from 0, 1 (twice as likely), 2, 4, 8, 16, 32;
- its texts from a pool of hostile ones (empty, blank, 10000 characters, control characters,
  invalid UTF-8, emoji, CJK, RTL) and ordinary ones;
- its settings: none (the defaults), one of several valid combinations of beam_size, alpha,
  max_extra_length and num_hypotheses, or (1 request in 20) one out-of-range value, which must
  fail with InvalidArgument naming the input (counted as `rejected`, not as an error);
- or, 1 request in 4, another signature of the export (`OTHER_SIGNATURES`: `translate`,
  `translate_ids`, `score_pairs`, `translate_with_alignments`, `translate_with_prefix`,
  `translate_ids_with_prefix`, `translate_sample`) with inputs made from its texts; a
  signature of the export with no request here is an error (`uncalled_signatures`).

Checks: 0 errors (an exception other than the expected InvalidArgument, or a bad request that
was served); every output aligned (as many rows as inputs, and each row equal to what its text
gets alone with the same settings and signature, samples excepted: the references are
computed first, which is also the warm-up); resident memory (VmRSS) at the end less than 10% above its value after warm-up.
Prints p50/p99 latency per request and requests/s, and ends with one JSON line. Exit status 1
if a check fails.

`--latency` measures instead of soaking: for each batch size of `--batch-sizes` and each
count of `--clients` (threads on the one session), every request of a measurement carries
that many real sentences (`--source-file`, one a line) and the same `--beam-size` and
`--alpha`; a measurement ends after `--requests` requests in all (at least 4 per client) or
`--time-limit` seconds. Each row reports p50/p90/p99 latency of the served requests,
requests/s and sentences/s, and the load average (`os.getloadavg()`) before and after it.
`--reject-every N` makes every Nth request out of range (`beam_size=0`): it must fail with
InvalidArgument and is counted under `rejected`, never in the latency. `--rounds` repeats
the grid, measurements of every export (`--export` may be given more than once) and every
cell taking turns, so that a shared machine's load falls on all of them alike.

Without `--export`, a tiny export (d_model 32, 1 layer, 512 pieces; max_beam_size 4, or the
`--beam-size` of `--latency`) is built first in a child process (which imports
keras_transformer), so this process never does.

Usage (from the repository root):
    python -m benchmarks.serving_soak                                # 8 threads x 1000 requests
    python -m benchmarks.serving_soak --export saved_models/quickstart/1 --requests 200
    python -m benchmarks.serving_soak --latency --export saved_models/quickstart/1 \
        --source-file runs/quickstart/corpus/test.en       # batch 1 and 8 x 1, 8, 32 clients
"""

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time

from benchmarks.common import machine_line, machine_record, run_module

BATCH_SIZES = [0, 1, 1, 2, 4, 8, 16, 32]  # 1 twice: single sentences are the common case
# The soak's requests use beams 1 to this (VALID_SETTINGS), and its tiny export compiles as many.
SOAK_MAX_BEAM_SIZE = 4
# None: the request leaves every setting out (TF Serving fills the SignatureDef's defaults).
VALID_SETTINGS = [
    None,
    {"beam_size": 1},
    {"beam_size": 4, "num_hypotheses": 3},
    {"beam_size": 2, "alpha": 0.0, "max_extra_length": 2},
    {"beam_size": 3, "alpha": 1.5, "num_hypotheses": 2},
    {"alpha": 10.0, "max_extra_length": 0},
]
# One out-of-range value per bad request; the error must name the input.
BAD_SETTINGS = [
    {"beam_size": 0},
    {"beam_size": 99},
    {"alpha": float("nan")},
    {"alpha": float("inf")},
    {"alpha": -1.0},
    {"max_extra_length": -5},
    {"max_extra_length": 2**31 - 1},
    {"num_hypotheses": 0},
    {"beam_size": 1, "num_hypotheses": 2},
]
HOSTILE = [
    "",
    "   ",
    "\t\n",
    "x" * 10000,
    "control\x00\x07\x1bchars",
    "emoji 🎉🚀 ok",
    "中文测试",
    "עברית مرحبا",
    "a" * 300 + " " + "b" * 300,
    "\u200b\u200e\ufeff",
    "four hundred twenty-one\n\nhalf past seven",
]
ORDINARY = [
    "four hundred twenty-one",
    "half past seven",
    "on March third",
    "one red dog",
    "nineteen ninety-eight",
    "seventy-two green bottles",
    "in twenty ten",
    "three thousand and five",
    "quarter to nine",
    "twelve blue cars",
]
INVALID_UTF8 = [b"\xff\xfe\xfd", b"ok \xc3\x28 ok"]
# The inputs of one request to each signature besides serving_default, made from its texts
# (bytes): every signature of today's exports is called, each row checked against its text
# alone. A signature missing here is an error (`uncalled_signatures`), so that a new one is
# not left out of the soak.
OTHER_SIGNATURES = (
    "translate",
    "translate_ids",
    "score_pairs",
    "translate_with_alignments",
    "translate_with_prefix",
    "translate_ids_with_prefix",
    "translate_sample",
)
# Its samples depend on their row of the batch (one random stream per request): checked for
# shape, not against the text alone.
ROW_DEPENDENT = ("translate_sample",)


def request_signatures(signature_defs):
    """The signatures a client can call besides serving_default (`__saved_model_init_op` and
    the like are the loader's, not requests')."""
    return sorted(n for n in signature_defs if n != "serving_default" and not n.startswith("__"))


def piece_ids(text, length=8):
    """Made-up subword ids for `text` (4-99, then eos = 3), right-padded with 0: the ids
    signatures' input, deterministic per text."""
    ids = [4 + byte % 96 for byte in text[: length - 1]] + [3]
    return ids + [0] * (length - len(ids))


def signature_inputs(name, texts):
    """`{input: value}` of one request to signature `name` for `texts`; the settings a
    request leaves out come from the SignatureDef's defaults."""
    if name in ("translate", "translate_with_alignments"):
        return {"text": texts}
    if name == "translate_sample":
        return {"text": texts, "seed": 7, "top_k": 5}
    if name == "score_pairs":  # targets within the model's max_length, which longer ones fail
        return {"source": texts, "target": [text[:16][::-1] for text in texts]}
    if name == "translate_with_prefix":
        return {"text": texts, "target_prefix": [text[:3] for text in texts]}
    if name in ("translate_ids", "translate_ids_with_prefix"):
        import numpy as np

        source_ids = np.array([piece_ids(text) for text in texts], np.int32).reshape(-1, 8)
        if name == "translate_ids":
            return {"source_ids": source_ids}
        prefix_ids = np.array([piece_ids(text, 3)[:2] + [0] for text in texts], np.int32)
        return {"source_ids": source_ids, "prefix_ids": prefix_ids.reshape(-1, 3)}
    raise KeyError(f"no request for signature {name!r}: add it to OTHER_SIGNATURES")


def output_row(outputs, row):
    """Row `row` of every output, comparable across batches and printable as JSON: strings
    decoded (invalid bytes escaped), ids without their right padding, scores rounded to
    1e-3."""

    def plain(value):
        if hasattr(value, "tolist"):
            value = value.tolist()
        if isinstance(value, list):
            items = [plain(item) for item in value]
            while items and items[-1] == 0:  # the batch's padding, not the row's
                items.pop()
            return items
        if isinstance(value, bytes):
            return value.decode("utf-8", "backslashreplace")
        return round(value, 3) if isinstance(value, float) else value

    return {alias: plain(values[row]) for alias, values in sorted(outputs.items())}


def build_export(directory, max_beam_size):
    """A tiny export under `directory` (run in a child process); prints its path. The export
    compiles one search per beam width up to `max_beam_size`: the latency mode, whose requests
    all carry one beam, builds only as many."""
    import keras

    import keras_transformer as kt
    from keras_transformer.data import TextPairCorpus, train_vocabulary
    from keras_transformer.data.number_expressions import write_number_expressions
    from keras_transformer.export import export_saved_model

    paths = write_number_expressions(
        os.path.join(directory, "corpus"), seed=0, sizes=(("train", 3000),)
    )
    vocabulary = train_vocabulary(
        [TextPairCorpus(*paths["train"])], os.path.join(directory, "vocab"), vocab_size=512
    )
    keras.utils.set_random_seed(0)
    config = kt.TransformerConfig(
        vocab_size=vocabulary.size,
        num_layers=1,
        d_model=32,
        d_ff=64,
        num_heads=4,
        max_length=48,
        dropout=0.0,
    )
    model = kt.build_model(config)
    # Peaky distributions (random weights otherwise give near-ties that batching can flip).
    model.target_embedding.embeddings.assign(model.target_embedding.embeddings * 4.0)
    path = export_saved_model(
        model,
        vocabulary,
        "soak",
        base_dir=os.path.join(directory, "sm"),
        max_beam_size=max_beam_size,
        beam_size=min(2, max_beam_size),
        alpha=0.6,
        max_extra_length=6,
    )
    print(path)


def resident_mb():
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


class Server:
    """The TF1 session loader and TF Serving's request handling: missing inputs from the
    SignatureDef's defaults, outputs by alias."""

    def __init__(self, path):
        import importlib

        import tensorflow as tf

        # Imported for its side effect, registering the SentencePiece ops (a bare import
        # would be an unused name to a linter).
        importlib.import_module("tensorflow_text")

        self.tf = tf
        self.session = tf.compat.v1.Session(graph=tf.Graph())
        meta = tf.compat.v1.saved_model.loader.load(self.session, ["serve"], path)
        self.signatures = dict(meta.signature_def)
        self.signature = self.signatures["serving_default"]
        self.defaults = {k: tf.make_ndarray(v) for k, v in self.signature.defaults.items()}
        self.outputs = {alias: info.name for alias, info in self.signature.outputs.items()}

    def predict(self, texts, settings):
        feed = {self.signature.inputs["text"].name: texts}
        for name, info in self.signature.inputs.items():
            if name != "text":
                feed[info.name] = (settings or {}).get(name, self.defaults[name])
        return self.session.run(self.outputs, feed_dict=feed)

    def call(self, name, inputs):
        """One request to signature `name`: `inputs`, the rest from its defaults."""
        signature = self.signatures[name]
        defaults = {k: self.tf.make_ndarray(v) for k, v in signature.defaults.items()}
        feed = {
            info.name: inputs[alias] if alias in inputs else defaults[alias]
            for alias, info in signature.inputs.items()
        }
        outputs = {alias: info.name for alias, info in signature.outputs.items()}
        return self.session.run(outputs, feed_dict=feed)


def comma_separated_ints(text, name):
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        sys.exit(f"--{name} {text!r}: give positive integers separated by commas, e.g. 1,8")
    return values


def read_sources(path):
    """The non-blank lines of `path` as UTF-8 bytes (what a client sends), else ORDINARY."""
    if path is None:
        return [text.encode() for text in ORDINARY]
    if not os.path.isfile(path):
        sys.exit(f"--source-file {path}: no such file (give a text file, one sentence a line)")
    with open(path, encoding="utf-8") as lines:
        sources = [line.strip().encode() for line in lines if line.strip()]
    if not sources:
        sys.exit(f"--source-file {path}: no sentences in it (one a line)")
    return sources


def load_average():
    return [round(value, 2) for value in os.getloadavg()]


def latency_cell(server, sources, batch_size, clients, args):
    """One measurement: `clients` threads send requests of `batch_size` sentences with one
    beam and alpha until `args.requests` (at least 4 per client) have been sent; returns its
    row. A request out of range (`--reject-every`) must fail and is counted apart."""
    tf, lock = server.tf, threading.Lock()
    planned = max(args.requests, 4 * clients)
    settings = {"beam_size": args.beam_size, "alpha": args.alpha}
    tickets = iter(range(planned))
    latencies, counts, failures = [], {"rejected": 0, "sentences": 0}, []
    deadline = time.time() + args.time_limit

    def worker():
        while time.time() < deadline:
            with lock:
                ticket = next(tickets, None)
            if ticket is None:
                return
            start = ticket * batch_size
            texts = [sources[(start + i) % len(sources)] for i in range(batch_size)]
            reject = args.reject_every and (ticket + 1) % args.reject_every == 0
            begin = time.perf_counter()
            try:
                out = server.predict(texts, {**settings, "beam_size": 0} if reject else settings)
            except tf.errors.InvalidArgumentError as error:
                with lock:
                    if reject and "beam_size=" in error.message:
                        counts["rejected"] += 1
                    else:
                        failures.append(error.message[:300])
                continue
            except Exception as error:  # noqa: BLE001 - every failure is counted
                with lock:
                    failures.append(f"{type(error).__name__}: {str(error)[:300]}")
                continue
            elapsed = time.perf_counter() - begin
            with lock:
                if reject:
                    failures.append("beam_size=0 was served, expected InvalidArgument")
                elif out["translation"].shape != (batch_size,):
                    failures.append(f"{out['translation'].shape[0]} rows for {batch_size}")
                else:
                    latencies.append(elapsed)
                    counts["sentences"] += batch_size

    load_before, started = load_average(), time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    return latency_row(latencies, counts, failures, planned, wall, load_before)


def latency_row(latencies, counts, failures, planned, wall, load_before):
    """The figures of one measurement; the latency is over served requests only."""

    def ms(q):
        return round(1000 * percentile(latencies, q), 1) if latencies else None

    sent = len(latencies) + counts["rejected"] + len(failures)
    return {
        "requests": sent,
        "served": len(latencies),
        "rejected": counts["rejected"],
        "errors": len(failures),
        "first_errors": failures[:3],
        "latency_samples": len(latencies),
        "min_ms": ms(0),
        "p50_ms": ms(50),
        "p90_ms": ms(90),
        "p99_ms": ms(99),
        "max_ms": ms(100),
        "requests_per_s": round(len(latencies) / wall, 2),
        "sentences_per_s": round(counts["sentences"] / wall, 2),
        "seconds": round(wall, 2),
        "stopped_by_time_limit": sent < planned,
        "load_before": load_before,
        "load_after": load_average(),
    }


def measure_latency(args, exports, built):
    """`--latency`: every export x batch size x clients, `--rounds` times, interleaved; prints
    a table and one JSON line; 0 if no request failed unexpectedly."""
    args.requests = 96 if args.requests is None else args.requests
    args.time_limit = 120 if args.time_limit is None else args.time_limit
    batch_sizes = comma_separated_ints(args.batch_sizes, "batch-sizes")
    client_counts = comma_separated_ints(args.clients, "clients")
    sources = read_sources(args.source_file)
    load_start = load_average()
    servers = [Server(path) for path in exports]
    assert not any(m.startswith("keras_transformer") for m in sys.modules)
    settings = {"beam_size": args.beam_size, "alpha": args.alpha}
    for server in servers:  # warm-up: every batch size once, untimed
        for batch_size in batch_sizes:
            server.predict(sources[:batch_size], settings)
    rows = []
    for round_index in range(args.rounds):
        for export, server in zip(exports, servers):
            for batch_size in batch_sizes:
                for clients in client_counts:
                    row = latency_cell(server, sources, batch_size, clients, args)
                    rows.append(
                        {
                            "export": "tiny (built)" if built else export,
                            "round": round_index,
                            "batch_size": batch_size,
                            "beam_size": args.beam_size,
                            "alpha": args.alpha,
                            "clients": clients,
                            **row,
                        }
                    )
                    print(latency_line(rows[-1]), flush=True)
    result = {
        "benchmark": "serving_soak",
        "mode": "latency",
        "exports": ["tiny (built)"] if built else exports,
        "source_file": args.source_file,
        "sentences_in_pool": len(sources),
        "rows": rows,
        "load_start": load_start,
        "load_end": load_average(),
        **machine_record(["tensorflow", "tensorflow_text"]),
    }
    print(machine_line(result))
    print(json.dumps(result))
    return 0 if not any(row["errors"] for row in rows) else 1


def latency_line(row):
    return (
        f"{row['export']} round {row['round']}: batch {row['batch_size']}, beam "
        f"{row['beam_size']}, {row['clients']} clients: p50 {row['p50_ms']} ms, p99 "
        f"{row['p99_ms']} ms, {row['requests_per_s']} requests/s, {row['sentences_per_s']} "
        f"sentences/s ({row['served']} served, {row['rejected']} rejected, {row['errors']} "
        f"errors); load {row['load_before'][0]} -> {row['load_after'][0]}"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--export",
        action="append",
        help="a SavedModel version directory (default: build one); --latency takes several",
    )
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument(
        "--requests",
        type=int,
        help="requests per thread (default 1000); --latency: per measurement (default 96)",
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        help="stop sending after this many seconds (reported; default 1200, --latency: 120 "
        "per measurement)",
    )
    parser.add_argument("--seed", type=int, default=0)
    latency = parser.add_argument_group("latency (--latency)")
    latency.add_argument(
        "--latency",
        action="store_true",
        help="measure latency at one batch size and beam per measurement instead of soaking",
    )
    latency.add_argument("--source-file", help="sentences, one a line (default: a few built in)")
    latency.add_argument("--batch-sizes", default="1,8", help="comma-separated (default 1,8)")
    latency.add_argument("--clients", default="1,8,32", help="concurrent clients (default 1,8,32)")
    latency.add_argument("--beam-size", type=int, default=4)
    latency.add_argument("--alpha", type=float, default=0.6)
    latency.add_argument("--rounds", type=int, default=1, help="repeats of the whole grid")
    latency.add_argument(
        "--reject-every",
        type=int,
        default=0,
        help="every Nth request out of range, counted apart from the latency (default: none)",
    )
    parser.add_argument("--build", help=argparse.SUPPRESS)
    parser.add_argument(
        "--build-max-beam-size", type=int, default=SOAK_MAX_BEAM_SIZE, help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.build:
        build_export(args.build, args.build_max_beam_size)
        return 0
    if args.export and len(args.export) > 1 and not args.latency:
        parser.error("--export: the soak takes one export; several are for --latency")

    started = time.time()
    exports, workdir = args.export, None
    if not exports:
        workdir = tempfile.TemporaryDirectory(prefix="serving_soak_")
        max_beam_size = args.beam_size if args.latency else SOAK_MAX_BEAM_SIZE
        result = run_module(
            "benchmarks.serving_soak",
            "--build",
            workdir.name,
            "--build-max-beam-size",
            str(max_beam_size),
        )
        if result.returncode != 0:
            sys.exit(f"building the tiny export failed:\n{result.stderr[-3000:]}")
        exports = [result.stdout.strip().splitlines()[-1]]
    build_s = time.time() - started
    if args.latency:
        return measure_latency(args, exports, built=workdir is not None)
    return soak(args, exports[0], workdir, build_s)


def soak(args, export, workdir, build_s):
    """The robustness soak: mixed batch sizes, settings and hostile texts; 0 if every check
    passes."""
    args.requests = 1000 if args.requests is None else args.requests
    args.time_limit = 1200 if args.time_limit is None else args.time_limit
    server = Server(export)
    assert not any(m.startswith("keras_transformer") for m in sys.modules)
    tf = server.tf
    pool = [t.encode() for t in HOSTILE + ORDINARY] + INVALID_UTF8

    # References (each text alone, each settings), which also warm up every code path; then
    # one request per batch size and beam width, so that the allocator has seen every shape.
    started = time.time()
    references = {}
    for index, settings in enumerate(VALID_SETTINGS):
        for text in pool:
            out = server.predict([text], settings)
            references[text, index] = (
                out["translation"][0],
                float(out["score"][0]),
                out["nbest_translations"].shape[1],
            )
    # Every other signature of the export, each text alone: its references and warm-up.
    others = request_signatures(server.signatures)
    uncalled = [name for name in others if name not in OTHER_SIGNATURES]
    others = [name for name in others if name in OTHER_SIGNATURES]
    for name in others:
        for text in pool:
            references[name, text] = output_row(
                server.call(name, signature_inputs(name, [text])), 0
            )
    rng = random.Random(args.seed)
    for batch_size in BATCH_SIZES:
        for beam in range(1, SOAK_MAX_BEAM_SIZE + 1):
            server.predict([rng.choice(pool) for _ in range(batch_size)], {"beam_size": beam})
    warm_s = time.time() - started
    rss_warm = resident_mb()

    latencies, failures, lock = [], [], threading.Lock()
    counts = {"served": 0, "rejected": 0, "misaligned": 0, "sentences": 0}
    by_signature = {name: 0 for name in ["serving_default", *others]}
    rss_samples, stop_sampling = [], threading.Event()
    deadline = time.time() + args.time_limit

    def sample_rss():
        while not stop_sampling.wait(1.0):
            rss_samples.append(resident_mb())

    def worker(seed):
        rng = random.Random(seed)
        for _ in range(args.requests):
            if time.time() > deadline:
                return
            texts = [rng.choice(pool) for _ in range(rng.choice(BATCH_SIZES))]
            if others and rng.random() < 0.25:  # a request to another signature
                name = rng.choice(others)
                call_other(name, texts)
                continue
            bad = rng.random() < 0.05
            index = rng.randrange(len(VALID_SETTINGS))
            settings = dict(rng.choice(BAD_SETTINGS)) if bad else VALID_SETTINGS[index]
            if bad and "beam_size" not in settings and "num_hypotheses" in settings:
                settings["beam_size"] = 2
            begin = time.perf_counter()
            try:
                out = server.predict(texts, settings)
            except tf.errors.InvalidArgumentError as error:
                elapsed = time.perf_counter() - begin
                named = bad and any(f"{name}=" in error.message for name in settings)
                with lock:
                    latencies.append(elapsed)
                    if named:
                        counts["rejected"] += 1
                    else:
                        failures.append(f"{settings}: {error.message[:300]}")
                continue
            except Exception as error:  # noqa: BLE001 - every failure is counted
                with lock:
                    failures.append(f"{settings}: {type(error).__name__}: {str(error)[:300]}")
                continue
            elapsed = time.perf_counter() - begin
            misaligned = 0
            if bad:
                with lock:
                    failures.append(f"{settings}: served, expected InvalidArgument")
                continue
            if out["translation"].shape != (len(texts),) or out["score"].shape != (len(texts),):
                misaligned = len(texts) or 1
            else:
                for row, text in enumerate(texts):
                    translation, score, width = references[text, index]
                    if (
                        out["translation"][row] != translation
                        or abs(float(out["score"][row]) - score) > 1e-3
                        or out["nbest_translations"].shape[1] != width
                    ):
                        misaligned += 1
            with lock:
                latencies.append(elapsed)
                counts["served"] += 1
                counts["sentences"] += len(texts)
                counts["misaligned"] += misaligned
                by_signature["serving_default"] += 1

    def call_other(name, texts):
        begin = time.perf_counter()
        try:
            out = server.call(name, signature_inputs(name, texts))
        except Exception as error:  # noqa: BLE001 - every failure is counted
            with lock:
                failures.append(f"{name}: {type(error).__name__}: {str(error)[:300]}")
            return
        elapsed = time.perf_counter() - begin
        misaligned = 0
        if any(values.shape[:1] != (len(texts),) for values in out.values()):
            misaligned = len(texts) or 1
        elif name not in ROW_DEPENDENT:
            misaligned = sum(
                output_row(out, row) != references[name, text] for row, text in enumerate(texts)
            )
        with lock:
            latencies.append(elapsed)
            counts["served"] += 1
            counts["sentences"] += len(texts)
            counts["misaligned"] += misaligned
            by_signature[name] += 1

    sampler = threading.Thread(target=sample_rss, daemon=True)
    sampler.start()
    started = time.time()
    threads = [
        threading.Thread(target=worker, args=(args.seed * 1000 + i,)) for i in range(args.threads)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    soak_s = time.time() - started
    stop_sampling.set()
    rss_end = resident_mb()
    growth = (rss_end - rss_warm) / rss_warm

    requests = counts["served"] + counts["rejected"] + len(failures)
    planned = args.threads * args.requests
    result = {
        "benchmark": "serving_soak",
        "export": "tiny (built)" if workdir else export,
        "threads": args.threads,
        "requests_planned": planned,
        "requests": requests,
        "served": counts["served"],
        "rejected_invalid_argument": counts["rejected"],
        "errors": len(failures),
        "misaligned_rows": counts["misaligned"],
        "requests_by_signature": by_signature,
        "uncalled_signatures": uncalled,
        "sentences": counts["sentences"],
        "p50_ms": round(1000 * percentile(latencies, 50), 2),
        "p99_ms": round(1000 * percentile(latencies, 99), 2),
        "requests_per_s": round(requests / soak_s, 1),
        "sentences_per_s": round(counts["sentences"] / soak_s, 1),
        "rss_warm_mb": round(rss_warm, 1),
        "rss_end_mb": round(rss_end, 1),
        "rss_max_mb": round(max(rss_samples + [rss_end]), 1),
        "rss_growth_pct": round(100 * growth, 2),
        "build_s": round(build_s, 1),
        "warmup_s": round(warm_s, 1),
        "soak_s": round(soak_s, 1),
        "stopped_by_time_limit": requests < planned,
        **machine_record(["tensorflow", "tensorflow_text"]),
    }
    print(machine_line(result))
    for failure in failures[:10]:
        print("error:", failure)
    print(
        f"{requests} requests ({counts['served']} served, {counts['rejected']} rejected as "
        f"invalid, {len(failures)} errors), {counts['misaligned']} misaligned rows; "
        f"p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms, "
        f"{result['requests_per_s']} requests/s; RSS {result['rss_warm_mb']} -> "
        f"{result['rss_end_mb']} MB ({result['rss_growth_pct']:+.2f}%)"
    )
    print(json.dumps(result))
    for name in uncalled:
        print(f"error: signature {name} has no request in this soak (OTHER_SIGNATURES)")
    ok = not failures and not counts["misaligned"] and growth < 0.10 and not uncalled
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
