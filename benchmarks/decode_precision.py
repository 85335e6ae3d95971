"""Reduced-precision decoding: ours in float32, bfloat16 and int8 against CTranslate2's
float32, int8 and int8_bfloat16, on the same trained weights and the same real sentences.

Every side translates the whole source file with beam search (beam 4, batch 32, alpha 0 by
default: there CTranslate2's length penalty, length^alpha, and ours, GNMT's, agree), and is
scored with sacreBLEU against the reference file. Reported per side: sentences/s and target
tokens/s (the best of --repeats passes), the speed over ours in float32, BLEU and its change
from ours in float32, and the share of translations identical to ours in float32.

Ours:

- float32: `Translator` as shipped;
- bfloat16: the same weights cast into a `Transformer` built with the "bfloat16" dtype policy
  (weights and activations bfloat16; softmax, layer norm and the logits stay float32), which
  TensorFlow's oneDNN runs with AVX512-BF16 instructions where the CPU has them;
- int8: `keras.Model.quantize("int8")` on a copy (int8 weights with per-channel scales, inputs
  quantized per call); the layers it quantizes are listed by their int8 variables.

CTranslate2 (`keras_transformer.export.ctranslate2.export_ctranslate2` with `quantization`):
each side runs in its own worker process, because CTranslate2 picks its CPU GEMM library
(`CT2_USE_MKL`) once per process and neither library is the faster one for every type here;
`--ct2` names each side's quantization and library. The workers and ours take turns pass by
pass, so a machine whose load changes during the run slows every side alike.

`--moses-lowercase` prepares the sources as pipelines/multi30k.py trains on them (lower-cased,
Moses-tokenized), detokenizes the outputs, and adds the lower-cased Moses-tokenized BLEU that
pipeline reports. Ends with one JSON line; `headline` holds the ratios.

Usage (from the repository root):
    python -m benchmarks.decode_precision --trained runs/quickstart \\
        --source-file runs/quickstart/corpus/test.en --reference-file runs/quickstart/corpus/test.de
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import warnings

from benchmarks.common import (
    child_environment,
    machine_line,
    machine_record,
    module_command,
    set_tensorflow_threads,
)
from benchmarks.ct2_worker import CT2_DEFAULT, parse_ct2

THREADS = int(os.environ.get("DECODE_THREADS", "2"))
OURS = ("float32", "bfloat16", "int8")


# -- text -------------------------------------------------------------------------------------


def read_text(path, lines=None):
    from keras_transformer.data.corpora import read_lines

    texts = [line.decode("utf-8") for line in read_lines(path)]
    return texts[:lines] if lines else texts


class MosesLowercase:
    """The Multi30k pipeline's text preparation: lower-case and Moses-tokenize the source,
    Moses-detokenize the output (sacremoses, no escaping)."""

    def __init__(self, source_language, target_language):
        from sacremoses import MosesDetokenizer, MosesTokenizer

        self.tokenizer = MosesTokenizer(lang=source_language)
        self.detokenizer = MosesDetokenizer(lang=target_language)

    def source(self, text):
        return self.tokenizer.tokenize(text.lower(), return_str=True, escape=False)

    def output(self, text):
        return self.detokenizer.detokenize(text.split(), unescape=False)


def scores(hypotheses, references, moses_language=None):
    """`{"bleu": sacreBLEU}` (case-insensitive with `moses_language`), plus the lower-cased
    Moses-tokenized BLEU with `moses_language`."""
    import sacrebleu

    from keras_transformer.evaluation import moses_lowercase_bleu

    lowercase = moses_language is not None
    found = {
        "bleu": round(sacrebleu.corpus_bleu(hypotheses, [references], lowercase=lowercase).score, 2)
    }
    if lowercase:
        found["moses_lowercase_bleu"] = round(
            moses_lowercase_bleu(hypotheses, references, language=moses_language)[0], 2
        )
    return found


# -- ours ---------------------------------------------------------------------------------------


def bfloat16_model(model):
    """`model`'s weights, cast, in a `Transformer` built with the "bfloat16" dtype policy."""
    from keras_transformer import Transformer

    cast = Transformer(model.config, dtype="bfloat16")
    cast.set_weights(model.get_weights())
    return cast


def int8_model(model):
    """A copy of `model` quantized by `keras.Model.quantize("int8")`, and the paths of its
    int8 variables (the kernels it quantized)."""
    from keras_transformer import Transformer

    copy = Transformer(model.config)
    copy.set_weights(model.get_weights())
    with warnings.catch_warnings():  # one warning per layer that has no int8 form
        warnings.simplefilter("ignore", UserWarning)
        copy.quantize("int8")
    return copy, [weight.path for weight in copy.weights if weight.dtype == "int8"]


def our_side(model, vocabulary, precision, args):
    """`(translate(sources) -> texts, notes)` for ours at `precision`."""
    from keras_transformer import Translator

    notes = {}
    if precision == "bfloat16":
        model = bfloat16_model(model)
    elif precision == "int8":
        model, quantized = int8_model(model)
        notes["int8_variables"] = len(quantized)
        notes["float_variables"] = sorted(
            weight.path
            for weight in model.weights
            if weight.dtype != "int8" and "scale" not in weight.path and len(weight.shape) == 2
        )
    translator = Translator(
        model,
        vocabulary,
        beam_size=args.beam_size,
        alpha=args.alpha,
        max_extra_length=50,
        batch_size=args.batch_size,
    )
    return translator.translate, notes


# -- CTranslate2 --------------------------------------------------------------------------------


def ct2_worker(args):
    """The worker process of one CTranslate2 side: translates the pieces of --pieces-file
    once per line read from stdin, prints the seconds; the first pass's outputs go to
    --outputs-file."""
    import ctranslate2
    import sentencepiece

    directory = args.ct2_worker
    translator = ctranslate2.Translator(
        directory, device="cpu", intra_threads=THREADS, inter_threads=1
    )
    processor = sentencepiece.SentencePieceProcessor(
        model_file=os.path.join(directory, "sentencepiece.model")
    )
    pieces = json.loads(pathlib.Path(args.pieces_file).read_text())
    longest = max(len(p) for p in pieces)

    def run():
        return translator.translate_batch(
            pieces,
            beam_size=args.beam_size,
            max_batch_size=args.batch_size,
            length_penalty=args.alpha,
            max_decoding_length=min(longest + 1 + 50, args.max_length),
        )

    print(f"ready {translator.compute_type}", flush=True)
    for index, _ in enumerate(sys.stdin):
        start = time.perf_counter()
        outputs = run()
        seconds = time.perf_counter() - start
        if index == 0:
            hypotheses = [o.hypotheses[0] for o in outputs]
            pathlib.Path(args.outputs_file).write_text(
                json.dumps(
                    {
                        "texts": [processor.decode(h) for h in hypotheses],
                        "tokens": sum(len(h) + 1 for h in hypotheses),  # pieces + eos
                    }
                )
            )
        print(f"{seconds}", flush=True)
    return 0


class Ct2Side:
    """A running CTranslate2 worker: `run()` times one pass."""

    def __init__(self, model, vocabulary, texts, quantization, library, args, folder):
        from keras_transformer.export.ctranslate2 import export_ctranslate2

        directory = folder / f"ct2-{quantization}"
        if not directory.exists():
            export_ctranslate2(model, directory, quantization=quantization, vocabulary=vocabulary)
        keep = model.config.max_length - 1  # sources cut as the Translator cuts them
        processor = vocabulary.processor
        pieces = [
            [processor.id_to_piece(i) for i in vocabulary.encode(text)[:keep]] for text in texts
        ]
        pieces_file = folder / "pieces.json"
        pieces_file.write_text(json.dumps(pieces))
        self.outputs_file = folder / f"outputs-{quantization}-{library}.json"
        environment = child_environment()
        environment["CT2_USE_MKL"] = "1" if library == "mkl" else "0"
        environment["OMP_NUM_THREADS"] = str(THREADS)
        self.process = subprocess.Popen(
            module_command(
                "benchmarks.decode_precision",
                "--ct2-worker",
                directory,
                "--pieces-file",
                pieces_file,
                "--outputs-file",
                self.outputs_file,
                "--beam-size",
                args.beam_size,
                "--batch-size",
                args.batch_size,
                "--alpha",
                args.alpha,
                "--max-length",
                model.config.max_length,
            ),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=environment,
        )
        ready = self.process.stdout.readline().split()
        if not ready or ready[0] != "ready":
            raise RuntimeError(f"the CTranslate2 worker for {quantization} did not start")
        self.compute_type = ready[1]

    def run(self):
        self.process.stdin.write("run\n")
        self.process.stdin.flush()
        return float(self.process.stdout.readline())

    def outputs(self):
        return json.loads(self.outputs_file.read_text())

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=60)


# -- the run ------------------------------------------------------------------------------------


def build_sides(args, folder):
    """`{name: side}`; a side has `run() -> seconds`, `texts`, `tokens`, `notes`."""
    from keras_transformer.translation import load_model

    model, files = load_model(args.trained)
    vocabulary = files["vocabulary"]
    if vocabulary is None:
        raise SystemExit(f"--trained {args.trained}: no vocabulary found beside the model")
    from keras_transformer.data.vocabulary import load_vocabulary

    vocabulary = load_vocabulary(vocabulary)
    sides = {}
    for precision in filter(None, args.ours.split(",")):
        if precision not in OURS:
            raise SystemExit(f"--ours: {precision!r} is not one of {', '.join(OURS)}")
        translate, notes = our_side(model, vocabulary, precision, args)
        sides[f"ours {precision}"] = {"kind": "ours", "translate": translate, "notes": notes}
    for quantization, library in parse_ct2(args.ct2):
        side = Ct2Side(model, vocabulary, args.texts, quantization, library, args, folder)
        sides[f"ct2 {quantization}"] = {
            "kind": "ct2",
            "worker": side,
            "notes": {"library": library, "compute_type": side.compute_type},
        }
    return sides, vocabulary


def first_pass(sides, args, vocabulary):
    """Translates once with every side (tracing, compiling, loading): the outputs scored."""
    for name, side in sides.items():
        start = time.perf_counter()
        if side["kind"] == "ours":
            texts = side["translate"](args.texts)
            side["run"] = lambda translate=side["translate"]: _timed(translate, args.texts)
            side["texts"] = texts
            side["tokens"] = sum(len(vocabulary.encode(t)) + 1 for t in texts)
        else:
            side["worker"].run()
            side["run"] = side["worker"].run
            found = side["worker"].outputs()
            side["texts"], side["tokens"] = found["texts"], found["tokens"]
        print(f"# {name}: first pass {time.perf_counter() - start:.1f} s", flush=True)


def _timed(translate, texts):
    start = time.perf_counter()
    translate(texts)
    return time.perf_counter() - start


def rows_of(sides, seconds, args):
    rows = []
    for name, side in sides.items():
        texts = side["texts"]
        if args.preparation is not None:
            texts = [args.preparation.output(text) for text in texts]
        rows.append(
            {
                "side": name,
                **side["notes"],
                "seconds": round(seconds[name], 2),
                "sentences_per_second": round(len(args.texts) / seconds[name], 2),
                "tokens_per_second": round(side["tokens"] / seconds[name], 1),
                **scores(texts, args.references, args.moses_language),
                "identical_to_ours_float32": None,
                "_texts": side["texts"],
            }
        )
    reference = next((row for row in rows if row["side"] == "ours float32"), None)
    for row in rows:
        if reference is not None:
            row["speed_vs_ours_float32"] = round(
                row["sentences_per_second"] / reference["sentences_per_second"], 3
            )
            row["bleu_change"] = round(row["bleu"] - reference["bleu"], 2)
            row["identical_to_ours_float32"] = round(
                sum(a == b for a, b in zip(row["_texts"], reference["_texts"]))
                / len(row["_texts"]),
                4,
            )
    for row in rows:
        del row["_texts"]
    return rows


def headline(rows):
    """The ratios the results page quotes: ours at each precision over ours in float32 and
    over CTranslate2 at the same precision, and CTranslate2 int8's BLEU change."""
    by_side = {row["side"]: row for row in rows}

    def ratio(a, b):
        if a in by_side and b in by_side:
            return round(by_side[a]["sentences_per_second"] / by_side[b]["sentences_per_second"], 3)
        return None

    def change(a, b, key="bleu"):
        if a in by_side and b in by_side:
            return round(by_side[a][key] - by_side[b][key], 2)
        return None

    return {
        "bfloat16_speed_vs_float32": ratio("ours bfloat16", "ours float32"),
        "int8_speed_vs_float32": ratio("ours int8", "ours float32"),
        "float32_vs_ct2_float32": ratio("ours float32", "ct2 float32"),
        "int8_vs_ct2_int8": ratio("ours int8", "ct2 int8"),
        "bfloat16_bleu_change": change("ours bfloat16", "ours float32"),
        "int8_bleu_change": change("ours int8", "ours float32"),
        "ct2_int8_bleu_vs_ours_float32": change("ct2 int8", "ours float32"),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trained", metavar="RUN", help="run folder or .keras file")
    parser.add_argument("--source-file", help="sources, one per line (plain or .gz)")
    parser.add_argument("--reference-file", help="reference translations, line by line")
    parser.add_argument("--lines", type=int, default=None, help="first lines only")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--alpha", type=float, default=0.0, help="length penalty (0: CTranslate2 agrees)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per side")
    parser.add_argument("--ours", default=",".join(OURS), help="our precisions")
    parser.add_argument(
        "--ct2",
        default=CT2_DEFAULT,
        help="CTranslate2 sides as QUANTIZATION:LIBRARY (mkl or dnnl); empty: none",
    )
    parser.add_argument(
        "--moses-lowercase",
        metavar="SRC-TGT",
        help="lower-case and Moses-tokenize the sources as pipelines/multi30k.py (e.g. en-de)",
    )
    # The CTranslate2 worker's own options.
    parser.add_argument("--ct2-worker", help=argparse.SUPPRESS)
    parser.add_argument("--pieces-file", help=argparse.SUPPRESS)
    parser.add_argument("--outputs-file", help=argparse.SUPPRESS)
    parser.add_argument("--max-length", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.ct2_worker:
        return ct2_worker(args)
    if not (args.trained and args.source_file and args.reference_file):
        parser.error("--trained, --source-file and --reference-file are required")

    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
    set_tensorflow_threads(THREADS, inter=1)
    args.preparation, args.moses_language = None, None
    args.texts = read_text(args.source_file, args.lines)
    args.references = read_text(args.reference_file, args.lines)
    if len(args.texts) != len(args.references):
        parser.error(
            f"{args.source_file} has {len(args.texts)} lines but {args.reference_file} "
            f"{len(args.references)}"
        )
    if args.moses_lowercase:
        source_language, _, args.moses_language = args.moses_lowercase.partition("-")
        args.preparation = MosesLowercase(source_language, args.moses_language)
        args.texts = [args.preparation.source(text) for text in args.texts]

    machine = machine_record(["tensorflow", "keras", "ctranslate2"])
    print(machine_line(machine, THREADS))
    print(
        f"# {args.trained}: {len(args.texts)} lines of {args.source_file}, beam "
        f"{args.beam_size}, batch {args.batch_size}, alpha {args.alpha}; best of "
        f"{args.repeats} passes per side, the sides taking turns",
        flush=True,
    )
    load = {"before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="decode-precision-") as folder:
        sides, vocabulary = build_sides(args, pathlib.Path(folder))
        try:
            first_pass(sides, args, vocabulary)
            best = {name: float("inf") for name in sides}
            for _ in range(args.repeats):
                for name, side in sides.items():
                    best[name] = min(best[name], side["run"]())
        finally:
            for side in sides.values():
                if side["kind"] == "ct2":
                    side["worker"].close()
    load["after"] = os.getloadavg()[0]
    rows = rows_of(sides, best, args)
    print(
        f"{'side':22} {'sent/s':>8} {'tokens/s':>9} {'x fp32':>7} {'BLEU':>6} {'change':>7} "
        f"{'same':>6}"
    )
    for row in rows:
        print(
            f"{row['side']:22} {row['sentences_per_second']:>8.2f} "
            f"{row['tokens_per_second']:>9.1f} {row.get('speed_vs_ours_float32', float('nan')):>7.3f} "
            f"{row['bleu']:>6.2f} {row.get('bleu_change', float('nan')):>+7.2f} "
            f"{row['identical_to_ours_float32'] or float('nan'):>6.1%}"
        )
    print(
        json.dumps(
            {
                "benchmark": "decode_precision",
                **machine,
                "threads": THREADS,
                "load_average": load,
                "trained": str(args.trained),
                "source_file": str(args.source_file),
                "lines": len(args.texts),
                "beam_size": args.beam_size,
                "batch_size": args.batch_size,
                "alpha": args.alpha,
                "moses_lowercase": args.moses_lowercase,
                "rows": rows,
                "headline": headline(rows),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
