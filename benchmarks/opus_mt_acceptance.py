"""The whole chain on an OPUS-MT-style model that transformers trained: import, translate,
serve, CTranslate2, fine-tune, each checked against its reference.

For a checkpoint folder in the Hugging Face layout (`benchmarks.marian_reference` trains one
on Multi30k with transformers alone), through the command line as a user runs it:

1. `keras-transformer import`; a second import into the same run is refused;
2. our search against transformers' `generate` on N dev sentences (`benchmarks.opus_mt_check`):
   greedy, beam 4 at alpha 0, beam 4 with the power penalty at alpha 1;
3. `export`: the SavedModel's `serving_default` (TF Serving's session loader) and its
   `translate` (TF2 loading) against `Translator.translate` with the run's published settings;
4. `export --format ctranslate2`: CTranslate2's output against ours, at alpha 0 and with the
   published settings;
5. `train --init-from` for 20 updates on the dev text.

    KT_DATA_DIR=../shared/data python -m benchmarks.opus_mt_acceptance --model marian-m30k

Ends with one JSON line: the share of identical outputs of each check, and whether the second
import was refused and the fine-tuning ran its updates.
"""

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

from benchmarks.opus_mt_check import check as check_against_generate

# (label, beam size, length penalty, alpha) of the checks against transformers' generate.
GENERATE_SETTINGS = [
    ("greedy", 1, "power", 0.0),
    ("beam4_alpha0", 4, "power", 0.0),
    ("beam4_power_alpha1", 4, "power", 1.0),
]
TUNING_UPDATES = 20


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a MarianMTModel checkpoint folder")
    parser.add_argument("--data-dir", default=os.environ.get("KT_DATA_DIR"))
    parser.add_argument("-n", type=int, default=100, help="Multi30k dev sentences (default 100)")
    parser.add_argument("--work-dir", help="keep the run, exports and tuned run here")
    return parser.parse_args(argv)


def cli(*argv, check=True):
    """`keras-transformer ARGV` in a fresh process; returns the finished process."""
    command = [sys.executable, "-m", "keras_transformer", *map(str, argv)]
    result = subprocess.run(command, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return result


def dev_text(data_dir, n, work):
    """The first `n` Multi30k dev pairs as plain files in `work`; returns their paths."""
    paths = {}
    for side in ("en", "de"):
        with gzip.open(os.path.join(data_dir, "multi30k", f"val.{side}.gz"), "rt") as file:
            lines = [next(file).rstrip("\n") for _ in range(n)]
        paths[side] = os.path.join(work, f"dev.{side}")
        with open(paths[side], "w", encoding="utf-8") as file:
            file.write("\n".join(lines) + "\n")
    return paths


def read(path):
    with open(path, encoding="utf-8") as file:
        return [line.rstrip("\n") for line in file]


def against_generate(model, run, sources):
    """{label: share identical with transformers' generate} for `GENERATE_SETTINGS`."""
    shares = {}
    for label, beam_size, length_penalty, alpha in GENERATE_SETTINGS:
        args = argparse.Namespace(
            model=model, sentences=sources, n=None, beam_size=beam_size, alpha=alpha,
            length_penalty=length_penalty, max_extra_length=50,
        )  # fmt: skip
        record = check_against_generate(args, run, model)
        shares[label] = record["fraction"]
        print(f"# generate, {label}: {record['identical']}/{record['sentences']}", file=sys.stderr)
    return shares


# TF Serving's path (the session loader, `serving_default` with the SignatureDef's defaults)
# and TF2 loading (the `translate` function, the export's defaults).
SAVED_MODEL_PROGRAM = """
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  the SentencePiece ops, as TF Serving links them
path, texts = sys.argv[1], json.loads(open(sys.argv[2]).read())
loaded = tf.saved_model.load(path)  # kept: its functions reference its variables
tf2 = loaded.translate(texts)["translation"].numpy()
with tf.compat.v1.Session(graph=tf.Graph()) as session:
    signature = tf.compat.v1.saved_model.loader.load(session, ["serve"], path).signature_def[
        "serving_default"]
    feed = {signature.inputs["text"].name: texts}
    for key, tensor_info in signature.inputs.items():
        if key != "text":
            feed[tensor_info.name] = tf.make_ndarray(signature.defaults[key])
    served = session.run(signature.outputs["translation"].name, feed_dict=feed)
print(json.dumps({"serving_default": [t.decode() for t in served],
                  "tf2_translate": [t.decode() for t in tf2]}))
"""


def saved_model_shares(run, sources, ours, work):
    """{path: share of the SavedModel's outputs equal to `ours`}: `serving_default` through TF
    Serving's session loader and `translate` through TF2 loading, the export's defaults (the
    run's published settings)."""
    cli("export", "--model", run, "--name", "opus", "--base-dir", os.path.join(work, "saved"))
    with open(os.path.join(work, "sources.json"), "w") as file:
        json.dump(read(sources), file)
    result = subprocess.run(
        [sys.executable, "-c", SAVED_MODEL_PROGRAM, os.path.join(work, "saved", "opus", "1"),
         os.path.join(work, "sources.json")],
        capture_output=True, text=True,
    )  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"loading the SavedModel failed:\n{result.stderr[-3000:]}")
    outputs = json.loads(result.stdout.strip().splitlines()[-1])
    return {
        path: sum(a == b for a, b in zip(texts, ours)) / len(ours)
        for path, texts in outputs.items()
    }


def ctranslate2_shares(run, sources, translator, work):
    """{setting: share of CTranslate2's outputs equal to ours} at alpha 0 and at the run's
    published settings, from `export --format ctranslate2`."""
    import ctranslate2

    from keras_transformer.data.marian_vocabulary import MarianVocabulary

    folder = os.path.join(work, "ct2")
    cli("export", "--model", run, "--format", "ctranslate2", "--output", folder)
    vocabulary = MarianVocabulary.from_folder(folder)
    table = {index: piece for piece, index in vocabulary.source_table.items()}
    texts = read(sources)
    # CTranslate2 appends eos itself: the source tokens without it.
    batch = [[table[i] for i in vocabulary.encode_source(t, add_eos=False)] for t in texts]
    peer = ctranslate2.Translator(folder, inter_threads=1)
    shares = {}
    for label, alpha in (("alpha0", 0.0), ("published", translator.alpha)):
        searcher = (
            translator if alpha == translator.alpha else type(translator).load(run, alpha=alpha)
        )
        ours = searcher.translate(texts)
        theirs = [
            vocabulary.decode_target([vocabulary.source_table[p] for p in hypothesis])
            for hypothesis in _ctranslate2_best(peer, batch, translator, alpha)
        ]
        shares[label] = sum(a == b for a, b in zip(theirs, ours)) / len(texts)
    return shares


def _ctranslate2_best(peer, batch, translator, alpha):
    """CTranslate2's best output tokens for each source, one at a time under our length cap
    (the source with eos plus `max_extra_length`, at most the model's maximum length)."""
    for tokens in batch:
        cap = min(len(tokens) + 1 + translator.max_extra_length, translator.max_source_length)
        result = peer.translate_batch(
            [tokens], beam_size=translator.beam_search.beam_size, length_penalty=alpha,
            min_decoding_length=0,  # CTranslate2's default, 1, forbids an empty output
            max_decoding_length=cap,
        )  # fmt: skip
        yield result[0].hypotheses[0]


def tuning_updates(run, paths, work):
    """`train --init-from RUN` for `TUNING_UPDATES` updates on the dev text; returns the
    updates its history records."""
    config = {
        "output_dir": os.path.join(work, "tuned"),
        "data": {"train": [{"source": paths["en"], "target": paths["de"]}], "dev": None,
                 "token_budget": 1024},
        "schedule": {"train_steps": TUNING_UPDATES, "warmup_steps": 10, "log_every_steps": 10,
                     "eval_every_steps": 10},
        "checkpoints": {"every_minutes": None, "every_steps": TUNING_UPDATES, "average_last": 1},
    }  # fmt: skip
    with open(os.path.join(work, "tune.json"), "w") as file:
        json.dump(config, file)
    cli("train", "--config", os.path.join(work, "tune.json"), "--init-from", run)
    with open(os.path.join(work, "tuned", "history.json")) as file:
        return max(entry["step"] for entry in json.load(file))


def accept(args, work):
    from keras_transformer.translation import Translator

    run = os.path.join(work, "run")
    cli("import", "--format", "marian", "--model", args.model, "--output", run)
    again = cli("import", "--format", "marian", "--model", args.model, "--output", run, check=False)
    paths = dev_text(args.data_dir, args.n, work)
    record = {"model": args.model, "sentences": args.n}
    record["second_import_refused"] = again.returncode == 2 and "exists" in again.stderr
    record["generate"] = against_generate(args.model, run, paths["en"])
    translator = Translator.load(run)  # the published settings of decoding.json
    ours = translator.translate(read(paths["en"]))
    record["published"] = {"beam_size": translator.beam_search.beam_size, "alpha": translator.alpha}
    record["saved_model"] = saved_model_shares(run, paths["en"], ours, work)
    record["ctranslate2"] = ctranslate2_shares(run, paths["en"], translator, work)
    record["tuning_updates"] = tuning_updates(run, paths, work)
    return record


def main(argv=None):
    args = parse_args(argv)
    if not args.data_dir:
        raise SystemExit("set KT_DATA_DIR or --data-dir: the folder that holds multi30k/")
    started = time.perf_counter()
    if args.work_dir:
        os.makedirs(args.work_dir)  # a new folder: nothing of an earlier check is reused
        record = accept(args, args.work_dir)
    else:
        with tempfile.TemporaryDirectory() as work:
            record = accept(args, work)
    record["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
