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
import shutil
import sys
import tempfile
import time

import numpy as np

from benchmarks.common import (
    ROOT,
    best_seconds,
    importable_peers,
    machine_line,
    machine_record,
    set_tensorflow_threads,
)

THREADS = int(os.environ.get("DECODE_THREADS", "2"))
CONFIGS = {
    "tiny": dict(num_layers=1, d_model=64, d_ff=128, num_heads=4),  # for tests
    "small": dict(num_layers=3, d_model=256, d_ff=1024, num_heads=4),
    "base": dict(num_layers=6, d_model=512, d_ff=2048, num_heads=8),
}
PEERS = ("ours", "nocache", "kerashub", "ct2", "savedmodel")
PEER_MODULES = {"kerashub": "keras_hub", "ct2": "ctranslate2"}


def build(name, vocab_size, seed=0):
    import keras

    from keras_transformer import TransformerConfig, build_model

    keras.utils.set_random_seed(seed)
    config = TransformerConfig(vocab_size=vocab_size, dropout=0.0, max_length=512, **CONFIGS[name])
    return build_model(config)


def random_sources(batch_size, source_length, vocab_size, seed=0):
    rng = np.random.default_rng(seed)
    sources = rng.integers(4, vocab_size, size=(batch_size, source_length)).astype("int32")
    sources[:, -1] = 3  # eos
    return sources


# -- ours -------------------------------------------------------------------------------------


def ours(model, beam_size, output_length, source_length, compile=True):
    from keras_transformer.decoding import BeamSearch, as_decoder
    from keras_transformer.translation import compile_search

    search = BeamSearch(
        beam_size=beam_size,
        alpha=0.6,
        max_extra_length=output_length - source_length,
        min_length=output_length,
    )
    return compile_search(lambda s: tuple(search(model, s)), as_decoder(model), compile)


class NoCacheDecoder:
    """The decoder interface without the key/value cache: each step runs the decoder stack on
    the whole fixed-size prefix buffer and keeps the logits of the current position."""

    def __init__(self, model):
        config = model.config
        self.model = model
        self.vocab_size, self.max_length = config.vocab_size, config.max_length
        self.pad_id, self.bos_id, self.eos_id = config.pad_id, config.bos_id, config.eos_id
        self.variables = list(model.variables)

    def initial_state(self, source_ids, max_length):
        from keras import ops

        memory, memory_mask = self.model.encode(source_ids)
        prefix = ops.full((ops.shape(source_ids)[0], max_length), self.pad_id, "int32")
        return (memory, memory_mask), (prefix,)

    def step(self, token_ids, static, dynamic, step):
        from keras import ops

        memory, memory_mask = static
        (prefix,) = dynamic
        width = ops.shape(prefix)[1]
        prefix = ops.where(ops.arange(width)[None, :] == step, token_ids, prefix)
        hidden = self.model.decoder(
            self.model.target_embedding(prefix), memory, memory_mask=memory_mask
        )
        hidden = ops.take(hidden, ops.expand_dims(step, 0), axis=1)
        logits = ops.cast(self.model.output_projection(hidden, reverse=True), "float32")
        return ops.log_softmax(logits[:, 0], axis=-1), (prefix,)


def ours_without_cache(model, beam_size, output_length, source_length):
    from keras_transformer.decoding import BeamSearch
    from keras_transformer.translation import compile_search

    decoder = NoCacheDecoder(model)
    search = BeamSearch(
        beam_size=beam_size,
        alpha=0.6,
        max_extra_length=output_length - source_length,
        min_length=output_length,
    )
    return compile_search(lambda s: tuple(search(decoder, s)), decoder)


# -- keras-hub ------------------------------------------------------------------------------


def keras_hub_beam_sampler(model, beam_size, output_length, source_length):
    import tensorflow as tf
    from keras import ops
    from keras_hub.samplers import BeamSampler

    sampler = BeamSampler(num_beams=beam_size)
    bos = model.config.bos_id

    def run(source_ids):
        batch_size = ops.shape(source_ids)[0]
        memory, memory_mask = model.encode(source_ids)
        cache = (memory_mask, model.init_cache(memory, output_length))
        prompt = ops.concatenate(
            [
                ops.full((batch_size, 1), bos, "int32"),
                ops.zeros((batch_size, output_length), "int32"),
            ],
            axis=1,
        )

        def next_fn(prompt, cache, index):
            memory_mask, layers = cache
            tokens = ops.slice(prompt, [0, index - 1], [ops.shape(prompt)[0], 1])
            logits, layers = model.decode_step(tokens, memory_mask, layers, index - 1)
            return logits, None, (memory_mask, layers)

        # No stop token: it generates exactly `output_length` tokens.
        return sampler(next_fn, prompt, cache=cache, index=1, stop_token_ids=None)

    return tf.function(run)


# -- CTranslate2 ----------------------------------------------------------------------------


def ctranslate2_model(model, directory):
    """Saves `model` as a CTranslate2 model (the library's converter,
    `keras_transformer.export.ctranslate2`; the sources here carry their eos already) and
    returns its `Translator` and the token of each id."""
    import ctranslate2

    from keras_transformer.export.ctranslate2 import ctranslate2_spec

    tokens = ["<blank>", "<unk>", "<s>", "</s>"] + [
        f"t{i}" for i in range(4, model.config.vocab_size)
    ]
    spec = ctranslate2_spec(model, tokens, add_source_eos=False)
    spec.optimize(quantization=None)
    spec.save(directory)
    return ctranslate2.Translator(
        directory, device="cpu", compute_type="float32", intra_threads=THREADS, inter_threads=1
    ), tokens


def ctranslate2_runner(translator, tokens, beam_size, output_length):
    def run(source_ids):
        batch = [[tokens[i] for i in row if i != 0] for row in source_ids]
        return translator.translate_batch(
            batch,
            beam_size=beam_size,
            max_batch_size=len(batch),
            max_decoding_length=output_length,
            min_decoding_length=output_length,
            length_penalty=0.6,
            return_scores=False,
        )

    return run


def ctranslate2_agrees_with_ours(model, translator, tokens, sources, steps=10):
    """Greedy outputs of CTranslate2 and ours on the same weights: fraction of equal tokens."""
    from keras import ops

    from keras_transformer.decoding import greedy_search

    ids = ops.convert_to_numpy(
        greedy_search(
            model, sources[:4], max_extra_length=steps - sources.shape[1], min_length=steps
        ).ids
    )[:, 0, :steps]
    theirs = translator.translate_batch(
        [[tokens[i] for i in row if i != 0] for row in sources[:4]],
        beam_size=1,
        max_decoding_length=steps,
        min_decoding_length=steps,
    )
    theirs = [[tokens.index(t) for t in r.hypotheses[0][:steps]] for r in theirs]
    matches = sum(
        a == b for row_a, row_b in zip(ids.tolist(), theirs) for a, b in zip(row_a, row_b)
    )
    return matches / sum(len(r) for r in theirs)


def source_commit():
    """The checked-out commit, with "+changes" when the measured code (the library or the
    benchmarks) differs from it; None outside a git checkout."""
    import subprocess

    def git(*command):
        return subprocess.run(
            ["git", *command], capture_output=True, text=True, check=False, cwd=ROOT
        ).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return None
    return commit + (
        "+changes"
        if git(
            "status", "--porcelain", "--untracked-files=no", "--", "keras_transformer", "benchmarks"
        )
        else ""
    )


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


# -- a trained model on real text ---------------------------------------------------------------

# Both length penalties agree only at alpha 0 (CTranslate2 divides by length^alpha, ours by
# GNMT's ((5 + length) / 6)^alpha): the comparison runs there, ours also at the paper's 0.6.
COMPARED_ALPHA = 0.0
PAPER_ALPHA = 0.6
MAX_EXTRA_LENGTH = 50  # output cap: source length (eos included) + 50, at most max_length
# Our side in each precision: the row's precision -> `Translator.load(precision=)`. A precision
# not listed here, or one this CPU cannot run fast, gets no row of ours (see "skipped_rows").
OUR_PRECISIONS = {"fp32": "float32", "bf16": "bf16"}
CT2_COMPUTE_TYPES = {"fp32": ("float32", None), "int8": ("int8", "int8")}  # (compute, stored)
# The CTranslate2 precision each of our precisions is set against: bf16 is our reduced
# precision, int8 CTranslate2's.
CT2_COUNTERPART = {"fp32": "fp32", "int8": "int8", "bf16": "int8"}
PREPROCESSING = ("none", "lowercase+moses")
MIN_IDENTICAL = 0.98  # under this share the CTranslate2 conversion or the search differs


def read_source_lines(path, count, preprocessing="none"):
    """The first `count` non-blank lines of a plain or gzipped file, prepared as the model's
    training text was (`lowercase+moses`: as `pipelines/multi30k.py` prepares Multi30k)."""
    from keras_transformer.data.corpora import read_lines

    lines = []
    for raw in read_lines(path):
        line = raw.decode("utf-8")
        if line.strip():
            lines.append(line)
        if len(lines) == count:
            break
    if preprocessing == "lowercase+moses":
        from sacremoses import MosesTokenizer

        tokenizer = MosesTokenizer(lang="en")
        lines = [tokenizer.tokenize(line.lower(), return_str=True, escape=False) for line in lines]
    return lines


def identical_share(outputs, reference):
    """The share of positions where `outputs` equals `reference` (same sentences, in order).

    >>> identical_share(["a", "b", "c", "d"], ["a", "b", "x", "d"])
    0.75
    """
    if len(outputs) != len(reference):
        raise ValueError(f"{len(outputs)} outputs against {len(reference)} references")
    return sum(a == b for a, b in zip(outputs, reference)) / max(len(reference), 1)


def percentile_ms(seconds, q):
    return round(1000 * float(np.percentile(seconds, q)), 2)


class TrainedSides:
    """Every decoder of the trained comparison as `translate(lines) -> texts`, text in and
    text out (SentencePiece included on every side), on the same weights and settings."""

    def __init__(self, run, beam_size, directory, saved_model_path=None):
        from keras_transformer import Translator

        self.run = run
        self.beam_size = beam_size
        self.directory = directory
        self.saved_model_path = saved_model_path  # an export of `run`, or None: export here
        self.translators = {
            alpha: Translator.load(
                run, beam_size=beam_size, alpha=alpha, max_extra_length=MAX_EXTRA_LENGTH
            )
            for alpha in (COMPARED_ALPHA, PAPER_ALPHA)
        }
        self.model = self.translators[COMPARED_ALPHA].model
        self.vocabulary = self.translators[COMPARED_ALPHA].vocabulary
        self.max_length = self.model.config.max_length
        self.eos_id = self.model.config.eos_id

    def ours(self, precision, alpha, batch_size):
        from keras_transformer import Translator

        base = self.translators.get(alpha if precision == "fp32" else (precision, alpha))
        if base is None:
            base = Translator.load(
                self.run,
                precision=OUR_PRECISIONS[precision],
                beam_size=self.beam_size,
                alpha=alpha,
                max_extra_length=MAX_EXTRA_LENGTH,
            )
            self.translators[(precision, alpha)] = base
        base.batch_size = batch_size  # each call gets batches of this size, length-sorted
        return base.translate

    def ours_xla(self, batch_size):
        """Ours with `jit_compile=True` at the compared alpha: XLA searches one-sentence
        batches only, so this side runs at batch size 1 (None for larger batches)."""
        from keras_transformer import Translator

        if batch_size != 1:
            return None
        if "xla" not in self.translators:
            self.translators["xla"] = Translator.load(
                self.run,
                beam_size=self.beam_size,
                alpha=COMPARED_ALPHA,
                max_extra_length=MAX_EXTRA_LENGTH,
                batch_size=1,
                jit_compile=True,
            )
        return self.translators["xla"].translate

    def saved_model(self, batch_size):
        """The export's `serving_default` called as TF Serving calls it: one request per
        batch of `batch_size` texts with every setting as a tensor. The client sorts the
        texts by length first, as our Translator and CTranslate2 do inside."""
        import tensorflow as tf

        from keras_transformer.export import export_saved_model

        if not hasattr(self, "_signature"):
            path = self.saved_model_path or export_saved_model(
                self.model,
                self.vocabulary,
                "bench",
                base_dir=os.path.join(self.directory, "saved_models"),
                # The request's beam runs the same branch whatever the widest one compiled;
                # fewer branches only shorten the export.
                max_beam_size=self.beam_size,
                beam_size=self.beam_size,
                alpha=COMPARED_ALPHA,
                max_extra_length=MAX_EXTRA_LENGTH,
            )
            self._loaded = tf.saved_model.load(str(path))
            self._signature = self._loaded.signatures["serving_default"]
        settings = dict(
            beam_size=tf.constant(self.beam_size, tf.int32),
            alpha=tf.constant(COMPARED_ALPHA, tf.float32),
            max_extra_length=tf.constant(MAX_EXTRA_LENGTH, tf.int32),
            num_hypotheses=tf.constant(1, tf.int32),
            length_penalty=tf.constant("gnmt"),
        )

        def translate(lines):
            order = sorted(range(len(lines)), key=lambda i: -len(lines[i]))
            outputs = [None] * len(lines)
            for start in range(0, len(order), batch_size):
                chunk = order[start : start + batch_size]
                reply = self._signature(text=tf.constant([lines[i] for i in chunk]), **settings)
                for i, text in zip(chunk, reply["translation"].numpy()):
                    outputs[i] = text.decode("utf-8")
            return outputs

        return translate

    def ctranslate2(self, precision, batch_size):
        """CTranslate2 on the model `export_ctranslate2` writes (int8: stored and computed in
        int8), in its fastest faithful setup: its own worker process with the GEMM library
        fastest for the type (`ct2_library`), the whole input in one `translate_batch`, which
        sorts it by length and runs `max_batch_size` examples at a time; no scores. A call's
        seconds are the worker's `translate_batch` plus the text to pieces and back here."""
        from keras_transformer.export import export_ctranslate2
        from keras_transformer.export.ctranslate2 import vocabulary_tokens

        if not hasattr(self, "_ct2"):
            self._ct2, self._pieces = {}, vocabulary_tokens(self.vocabulary)
            self._piece_ids = {piece: i for i, piece in enumerate(self._pieces)}
        if precision not in self._ct2:
            compute_type, stored = CT2_COMPUTE_TYPES[precision]
            directory = os.path.join(self.directory, f"ct2-{precision}")
            export_ctranslate2(
                self.model, directory, quantization=stored, vocabulary=self.vocabulary
            )
            self._ct2[precision] = Ct2Worker(
                directory, compute_type, ct2_library(compute_type), self.beam_size
            )
        worker, pieces, piece_ids = self._ct2[precision], self._pieces, self._piece_ids
        keep = self.max_length - 1  # as the Translator cuts sources longer than the model's

        def translate(lines):
            start = time.perf_counter()
            sources = [[pieces[i] for i in self.vocabulary.encode(line)[:keep]] for line in lines]
            # Ours caps each output at its source length (eos included) + 50; CTranslate2
            # takes one cap per call: the longest (a cap is rarely reached on real text).
            cap = min(max(len(s) for s in sources) + 1 + MAX_EXTRA_LENGTH, self.max_length)
            hypotheses, seconds = worker.translate(sources, batch_size, cap)
            texts = [self.vocabulary.decode([piece_ids[p] for p in h]) for h in hypotheses]
            # The pipe to the worker is the benchmark's cost, not CTranslate2's.
            translate.seconds = time.perf_counter() - start - worker.exchange_seconds + seconds
            return texts

        return translate

    def backend(self, decoder, precision):
        if decoder == "CTranslate2":
            return self._ct2[precision].library
        return "tensorflow"

    def close(self):
        for worker in getattr(self, "_ct2", {}).values():
            worker.close()


# -- CTranslate2 in a worker process ------------------------------------------------------------


def ct2_library(compute_type):
    """ "mkl" or "dnnl": the GEMM library CTranslate2 runs `compute_type` fastest with here
    (decode_precision's defaults, measured on an AMD Zen 4 CPU); `CT2_LIBRARY_<TYPE>` (e.g.
    `CT2_LIBRARY_INT8=mkl`) overrides it."""
    from benchmarks.decode_precision import CT2_DEFAULT, parse_ct2

    fastest = dict(parse_ct2(CT2_DEFAULT))
    return os.environ.get(f"CT2_LIBRARY_{compute_type.upper()}", fastest.get(compute_type, "mkl"))


class Ct2Worker:
    """A CTranslate2 `Translator` in its own process: CTranslate2 reads `CT2_USE_MKL` once per
    process, and float32 and int8 are each fastest with a different library. `translate`
    sends one batch of pieces as a JSON line and returns `(hypotheses, seconds of the
    worker's translate_batch)`; `exchange_seconds` is that call's wall time."""

    def __init__(self, directory, compute_type, library, beam_size):
        import subprocess

        from benchmarks.common import child_environment, module_command

        environment = child_environment()
        environment["CT2_USE_MKL"] = "1" if library == "mkl" else "0"
        environment["OMP_NUM_THREADS"] = str(THREADS)
        self.library = library
        self.process = subprocess.Popen(
            module_command(
                "benchmarks.decode_throughput",
                "--ct2-worker",
                directory,
                "--ct2-compute-type",
                compute_type,
                "--beam-size",
                beam_size,
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


def ct2_worker(directory, compute_type, beam_size):
    """The worker's loop: one JSON request per stdin line, one JSON reply per stdout line."""
    import ctranslate2

    translator = ctranslate2.Translator(
        directory,
        device="cpu",
        compute_type=compute_type,
        intra_threads=THREADS,
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
            length_penalty=COMPARED_ALPHA,
            max_decoding_length=request["max_decoding_length"],
            min_decoding_length=0,
            return_scores=False,
        )
        seconds = time.perf_counter() - start
        hypotheses = [r.hypotheses[0] for r in results]
        print(json.dumps(dict(hypotheses=hypotheses, seconds=seconds)), flush=True)
    return 0


def trained_cases(sides, precisions, peers):
    """`[(decoder, precision, alpha, build(batch_size) -> translate)]`: the rows to run, and
    `{row: why not}` for the rows left out."""
    from keras_transformer.decoding.precision import check_precision
    from keras_transformer.errors import UserInputError

    cases, skipped = [], {}
    for precision in precisions:
        reason = None if precision in OUR_PRECISIONS else "not offered by the library"
        if reason is None:
            try:
                check_precision(OUR_PRECISIONS[precision])
            except UserInputError as error:  # bf16 on a CPU without AVX512-BF16 or AMX
                reason = str(error)
        if reason is not None:
            skipped[f"ours (Translator) {precision}"] = reason
            print(f"# skipping ours (Translator) {precision}: {reason}", flush=True)
        else:
            # Reduced precision at the compared alpha only: the paper's alpha is an fp32 row.
            for alpha in (COMPARED_ALPHA, PAPER_ALPHA)[: 2 if precision == "fp32" else 1]:
                cases.append(
                    (
                        "ours (Translator)",
                        precision,
                        alpha,
                        lambda b, p=precision, a=alpha: sides.ours(p, a, b),
                    )
                )
        if precision == "fp32":
            cases.append(("ours (Translator, XLA)", precision, COMPARED_ALPHA, sides.ours_xla))
        if precision == "fp32" and "savedmodel" in peers:
            cases.append(
                ("SavedModel (serving_default)", precision, COMPARED_ALPHA, sides.saved_model)
            )
        if "ct2" in peers and precision in CT2_COMPUTE_TYPES:
            cases.append(
                (
                    "CTranslate2",
                    precision,
                    COMPARED_ALPHA,
                    lambda b, p=precision: sides.ctranslate2(p, b),
                )
            )
    return cases, skipped


def warmup_lines(lines, vocabulary):
    """One line per padded source width (multiples of 8 pieces): what compiles every search
    shape that single-sentence calls meet."""
    by_width = {}
    for line in lines:
        by_width.setdefault(-(-(len(vocabulary.encode(line)) + 1) // 8), line)
    return list(by_width.values())


def timed_call(run, lines):
    """`(outputs, seconds)` of `run(lines)`: the wall time, or the seconds `run` reports of
    itself (a CTranslate2 worker's, without the pipe to it)."""
    start = time.perf_counter()
    outputs = run(lines)
    return outputs, getattr(run, "seconds", time.perf_counter() - start)


def time_batch_one(runners, lines, vocabulary):
    """Sentence by sentence, the sides taking turns on each (the first side rotates), so
    that background load hits every side alike: `{name: (outputs, seconds per sentence)}`."""
    for run in runners.values():
        for line in warmup_lines(lines, vocabulary):
            run([line])
    names = list(runners)
    outputs = {name: [] for name in names}
    seconds = {name: [] for name in names}
    for index, line in enumerate(lines):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            (text,), elapsed = timed_call(runners[name], [line])
            seconds[name].append(elapsed)
            outputs[name].append(text)
    return {name: (outputs[name], seconds[name]) for name in names}


def time_batched(runners, lines, repeats):
    """Every side translates all `lines` once untimed (compiling every batch shape), then
    `repeats` timed passes each, the sides taking turns in a rotating order: `{name: (outputs,
    median seconds of a pass)}`."""
    names = list(runners)
    outputs = {name: runners[name](lines) for name in names}
    seconds = {name: [] for name in names}
    for repeat in range(repeats):
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            outputs[name], elapsed = timed_call(runners[name], lines)
            seconds[name].append(elapsed)
    return {name: (outputs[name], float(np.median(seconds[name]))) for name in names}


def trained_rows(cases, lines, vocabulary, batch_sizes, repeats, backend):
    """Times every case at every batch size; returns the rows and each row's outputs.
    `backend(decoder, precision)` names the library a row ran on."""
    rows, outputs = [], {}
    for batch_size in batch_sizes:
        runners = {}
        for decoder, precision, alpha, build in cases:
            run = build(batch_size)
            if run is not None:  # None: the side does not run at this batch size
                runners[(decoder, precision, alpha)] = run
        if batch_size == 1:
            timed = time_batch_one(runners, lines, vocabulary)
        else:
            timed = time_batched(runners, lines, repeats)
        for (decoder, precision, alpha), (texts, seconds) in timed.items():
            total = sum(seconds) if batch_size == 1 else seconds
            generated = sum(len(vocabulary.encode(text)) + 1 for text in texts)  # pieces + eos
            row = dict(
                decoder=decoder,
                batch_size=batch_size,
                precision=precision,
                alpha=alpha,
                backend=backend(decoder, precision),
                seconds=round(total, 2),
                sentences_per_second=round(len(lines) / total, 2),
                tokens_per_second=round(generated / total, 1),
            )
            if batch_size == 1:
                row["latency_p50_ms"] = percentile_ms(seconds, 50)
                row["latency_p90_ms"] = percentile_ms(seconds, 90)
            print(f"# {json.dumps(row)}", flush=True)  # kept if a later batch size fails
            rows.append(row)
            outputs[(decoder, batch_size, precision, alpha)] = texts
    for row in rows:
        counterpart = CT2_COUNTERPART.get(row["precision"], row["precision"])
        reference = next(
            (
                r
                for r in rows
                if r["decoder"] == "CTranslate2"
                and r["batch_size"] == row["batch_size"]
                and r["precision"] == counterpart
            ),
            None,
        )
        row["vs_ctranslate2_precision"] = counterpart if reference else None
        row["sentences_vs_ctranslate2"] = (
            round(row["sentences_per_second"] / reference["sentences_per_second"], 3)
            if reference
            else None
        )
    return rows, outputs


def identical_outputs(rows, outputs, lines):
    """Our fp32 outputs at alpha 0 against CTranslate2's fp32 (the largest batch size), the
    share each row's outputs equal ours, and the first sentences where ours and CTranslate2
    differ."""
    largest = max(row["batch_size"] for row in rows)
    ours = outputs.get(("ours (Translator)", largest, "fp32", COMPARED_ALPHA))
    theirs = outputs.get(("CTranslate2", largest, "fp32", COMPARED_ALPHA))
    if ours is not None:
        for row in rows:
            key = (row["decoder"], row["batch_size"], row["precision"], row["alpha"])
            row["identical_to_ours"] = round(identical_share(outputs[key], ours), 4)
    if ours is None or theirs is None:
        return None, []
    differences = [
        dict(source=source, ours=a, ctranslate2=b)
        for source, a, b in zip(lines, ours, theirs)
        if a != b
    ]
    return round(identical_share(theirs, ours), 4), differences[:5]


def trained_model_throughput(args, peers):
    """Beam 4, max length source + 50, on real sentences with a trained model: ours
    (`Translator.translate`, alpha 0 and 0.6), the exported SavedModel's `serving_default`,
    and CTranslate2 (fp32, int8) on the same weights, at each batch size."""
    source_file = args.source_file or os.path.join(
        os.environ.get("KT_DATA_DIR", ""), "wmt", "newstest2013.en"
    )
    if not os.path.isfile(source_file):
        print(f"# --trained: {source_file} not found (set KT_DATA_DIR or --source-file)")
        return None
    lines = read_source_lines(source_file, args.lines, args.preprocess)
    directory = tempfile.mkdtemp(prefix="decode-trained-")
    try:
        sides = TrainedSides(args.trained, args.beam_size, directory, args.saved_model)
        cases, skipped = trained_cases(sides, args.precisions.split(","), peers)
        batch_sizes = [int(b) for b in args.trained_batch_sizes.split(",")]
        load_before = os.getloadavg()
        rows, outputs = trained_rows(
            cases, lines, sides.vocabulary, batch_sizes, args.repeats, sides.backend
        )
    finally:
        if "sides" in locals():
            sides.close()
        shutil.rmtree(directory, ignore_errors=True)
    identical, differences = identical_outputs(rows, outputs, lines)
    print(
        f"# trained model {args.trained} on the first {len(lines)} lines of {source_file} "
        f"(preprocessing {args.preprocess}); beam {args.beam_size}, cap source + "
        f"{MAX_EXTRA_LENGTH}; batch 1: each sentence alone, sides in turn; larger: median of "
        f"{args.repeats} passes in turn"
    )
    if identical is not None:
        print(f"# CTranslate2 fp32 output identical to ours (alpha 0): {identical:.1%}")
        if identical < MIN_IDENTICAL:
            print(f"# under {MIN_IDENTICAL:.0%}: the first differences follow")
            for difference in differences:
                print(f"#   {json.dumps(difference, ensure_ascii=False)}")
    print(
        f"{'decoder':30} {'prec':>5} {'on':>10} {'alpha':>5} {'batch':>5} {'sent/s':>8} "
        f"{'tokens/s':>9} {'p50 ms':>7} {'p90 ms':>7} {'x ct2':>6} {'ct2 at':>6} {'= ours':>6}"
    )
    for row in rows:
        print(
            f"{row['decoder']:30} {row['precision']:>5} {row['backend']:>10} {row['alpha']:>5} "
            f"{row['batch_size']:>5} {row['sentences_per_second']:>8.2f} "
            f"{row['tokens_per_second']:>9.1f} {row.get('latency_p50_ms', float('nan')):>7.1f} "
            f"{row.get('latency_p90_ms', float('nan')):>7.1f} "
            f"{row['sentences_vs_ctranslate2'] or float('nan'):>6.2f} "
            f"{row['vs_ctranslate2_precision'] or '-':>6} "
            f"{row.get('identical_to_ours', float('nan')):>6.1%}",
            flush=True,
        )
    return {
        "run": args.trained,
        "source_file": source_file,
        "preprocessing": args.preprocess,
        "lines": len(lines),
        "beam_size": args.beam_size,
        "max_extra_length": MAX_EXTRA_LENGTH,
        "repeats": args.repeats,
        "identical_to_ctranslate2": identical,
        "first_differences": differences,
        "rows": rows,
        "skipped_rows": skipped,
        "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
    }


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
    # The CTranslate2 worker's own options.
    parser.add_argument("--ct2-worker", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--ct2-compute-type", help=argparse.SUPPRESS)
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
    if args.ct2_worker:
        return ct2_worker(args.ct2_worker, args.ct2_compute_type, args.beam_size)
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
