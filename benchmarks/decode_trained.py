"""`decode_throughput --trained RUN`: a trained model decoding real sentences, ours (fp32 at
alpha 0 and 0.6, bf16 where the CPU has AVX512-BF16 or AMX, batch 1 with XLA), its SavedModel,
and CTranslate2 fp32 and int8, each CTranslate2 precision in its own worker process on the GEMM
library fastest for it (`benchmarks.ct2_worker`); benchmarks/README.md has the protocol and
the JSON fields.

Example:
    >>> identical_share(["a", "b"], ["a", "c"])
    0.5
"""

import json
import os
import shutil
import tempfile
import time

import numpy as np

from benchmarks.ct2_worker import Ct2Worker, ct2_library
from benchmarks.decode_peers import THREADS

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
                directory,
                compute_type,
                ct2_library(compute_type),
                self.beam_size,
                threads=THREADS,
                length_penalty=COMPARED_ALPHA,
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
