"""Does the TensorFlow of TF Serving 2.20.0 run an export written by this project's TF 2.21?

TF Serving 2.20.0 (the newest release at the time of writing; there is no 2.21 release)
builds against TensorFlow 2.20 and links tensorflow-text v2.20.0's SentencePiece ops. This
script writes a tiny export with the project's TensorFlow (2.21), then, in a side Python
environment with `tensorflow==2.20.0` and `tensorflow-text==2.20.0` (not the project's venv),
loads it the way TF Serving does and checks:

1. every op in the export's graphs is registered in TF 2.20 (core) or is a SentencePiece op
   of tensorflow-text 2.20 (what the server binary has);
2. the TF1 session loader (the Python face of TF Serving's C++ `LoadSavedModel`) loads it and,
   fed only `text` plus the SignatureDef's `defaults` (as TF Serving 2.14+ fills them), gives
   the same translations and scores as TF 2.21 does;
3. per-request settings give the same outputs as in TF 2.21, and an out-of-range one fails with
   InvalidArgument naming the input;
4. the TF2 loader's text-only `translate` endpoint gives the same translations;
5. every other signature of the export (`score_pairs`, `translate_ids`, the prefix, alignment
   and sampling signatures: `serving_soak.OTHER_SIGNATURES`) gives the same outputs there,
   and none is left uncalled.

What it does not prove: the server binary itself (REST/gRPC parsing, batching), which needs
Docker; TF Serving's predict path is the same session run (predict_util.cc).

The side environment (about 600 MB; not part of the project):

    python3 -m venv .venv-tf220
    .venv-tf220/bin/pip install "tensorflow==2.20.0" "tensorflow-text==2.20.0"

Usage (from the repository root, with the project's venv):

    python -m benchmarks.tf_serving_compat --side-python .venv-tf220/bin/python

Ends with one JSON line; exit status 1 if any check fails.
"""

import argparse
import json
import os
import pathlib
import sys
import tempfile

from benchmarks.common import machine_line, machine_record, run_module
from benchmarks.serving_soak import (
    OTHER_SIGNATURES,
    output_row,
    request_signatures,
    signature_inputs,
)

TEXTS = [
    "four hundred twenty-one",
    "half past seven",
    "",
    "   ",
    "x" * 2000,
    "emoji 🎉 ok",
    "中文测试",
    "one red dog",
    "seventy-two green bottles",
]
SETTINGS = [
    None,
    {"beam_size": 1},
    {"beam_size": 4, "alpha": 1.5, "num_hypotheses": 3},
    {"alpha": 0.0, "max_extra_length": 2},
]
SENTENCEPIECE_OPS = {
    "SentencepieceOp",
    "SentencepieceTokenizeOp",
    "SentencepieceTokenizeWithOffsetsOp",
    "SentencepieceDetokenizeOp",
    "SentencepieceIdToStringOp",
    "SentencepieceStringToIdOp",
    "SentencepieceVocabSizeOp",
}


def serve(path):
    """Runs in either environment, importing only tensorflow and tensorflow_text; prints one
    JSON line of every output."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401
    from tensorflow.core.protobuf import saved_model_pb2

    # graph_ops.saved_model_ops, repeated: the side environment has no keras_transformer.
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((pathlib.Path(path) / "saved_model.pb").read_bytes())
    ops = set()
    for meta_graph in proto.meta_graphs:
        ops.update(node.op for node in meta_graph.graph_def.node)
        for function in meta_graph.graph_def.library.function:
            ops.update(node.op for node in function.node_def)
    core = set(dir(tf.raw_ops))
    unknown = sorted(ops - core - SENTENCEPIECE_OPS)

    result = {
        "tensorflow": tf.__version__,
        "tensorflow_text": tensorflow_text.__version__,
        "ops": len(ops),
        "unknown_ops": unknown,
        "runs": [],
    }
    with tf.compat.v1.Session(graph=tf.Graph()) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
        signature = meta.signature_def["serving_default"]
        defaults = {k: tf.make_ndarray(v) for k, v in signature.defaults.items()}
        fetch = {k: v.name for k, v in signature.outputs.items()}
        for settings in SETTINGS + [{"beam_size": 0}]:
            feed = {signature.inputs["text"].name: [t.encode() for t in TEXTS]}
            for name, info in signature.inputs.items():
                if name != "text":
                    feed[info.name] = (settings or {}).get(name, defaults[name])
            try:
                out = session.run(fetch, feed_dict=feed)
                result["runs"].append(
                    {
                        "translation": [t.decode() for t in out["translation"]],
                        "score": [float(s) for s in out["score"]],
                        "nbest": [[t.decode() for t in row] for row in out["nbest_translations"]],
                    }
                )
            except tf.errors.InvalidArgumentError as error:
                result["runs"].append(
                    {
                        "invalid_argument": next(
                            (line for line in error.message.splitlines() if "out of range" in line),
                            error.message,
                        )
                    }
                )
        result["signatures"] = {}
        for name in request_signatures(meta.signature_def):
            if name not in OTHER_SIGNATURES:
                result["signatures"][name] = "uncalled"
                continue
            info = meta.signature_def[name]
            signature_defaults = {k: tf.make_ndarray(v) for k, v in info.defaults.items()}
            inputs = signature_inputs(name, [t.encode() for t in TEXTS])
            feed = {
                spec.name: inputs[alias] if alias in inputs else signature_defaults[alias]
                for alias, spec in info.inputs.items()
            }
            out = session.run({a: spec.name for a, spec in info.outputs.items()}, feed)
            result["signatures"][name] = [output_row(out, row) for row in range(len(TEXTS))]
    loaded = tf.saved_model.load(path)
    result["translate_endpoint"] = [
        t.decode() for t in loaded.translate(TEXTS)["translation"].numpy()
    ]
    print(json.dumps(result))


def run_serve(python, path):
    result = run_module("benchmarks.tf_serving_compat", "--serve", path, python=python)
    if result.returncode != 0:
        sys.exit(f"{python} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--side-python",
        default=".venv-tf220/bin/python",
        help="the Python of the side environment (TF 2.20)",
    )
    parser.add_argument("--export", help="a SavedModel version directory (default: build one)")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return 0
    if not os.path.exists(args.side_python):
        sys.exit(f"no side environment at {args.side_python}; see the module docstring")

    with tempfile.TemporaryDirectory(prefix="tf_serving_compat_") as workdir:
        export = args.export
        if export is None:  # the soak's tiny export: max_beam_size 4, defaults beam 2
            built = run_module("benchmarks.serving_soak", "--build", workdir)
            if built.returncode != 0:
                sys.exit(f"building the export failed:\n{built.stderr[-3000:]}")
            export = built.stdout.strip().splitlines()[-1]
        written = run_serve(sys.executable, export)
        side = run_serve(args.side_python, export)

    def same_rows(a, b):  # output_row's rows: floats rounded to 1e-3, so within one step
        def close(x, y):
            if isinstance(x, float) and isinstance(y, float):
                return abs(x - y) <= 1.5e-3
            if isinstance(x, list) and isinstance(y, list):
                return len(x) == len(y) and all(map(close, x, y))
            if isinstance(x, dict) and isinstance(y, dict):
                return x.keys() == y.keys() and all(close(x[k], y[k]) for k in x)
            return x == y

        return close(a, b)

    def same(a, b):  # texts exactly, scores to 1e-4 (two builds of the same kernels)
        if a.keys() != b.keys() or "score" not in a:
            return a == b
        return {k: v for k, v in a.items() if k != "score"} == {
            k: v for k, v in b.items() if k != "score"
        } and all(abs(x - y) <= 1e-4 for x, y in zip(a["score"], b["score"]))

    checks = {
        "all_ops_known_to_side_tf": side["unknown_ops"] == [],
        "session_outputs_equal": len(side["runs"]) == len(written["runs"])
        and all(same(a, b) for a, b in zip(side["runs"], written["runs"])),
        "defaults_filled_run_served": "translation" in side["runs"][0],
        "out_of_range_is_invalid_argument": "beam_size=0 is out of range"
        in side["runs"][-1].get("invalid_argument", ""),
        "translate_endpoint_equal": side["translate_endpoint"]
        == written["translate_endpoint"]
        == written["runs"][0]["translation"],
        "every_signature_called": bool(written["signatures"])
        and "uncalled" not in written["signatures"].values(),
        "signature_outputs_equal": side["signatures"].keys() == written["signatures"].keys()
        and all(
            same_rows(side["signatures"][name], written["signatures"][name])
            for name in written["signatures"]
        ),
    }
    machine = machine_record(["tensorflow", "tensorflow_text"])
    print(machine_line(machine))
    for name, passed in checks.items():
        print(f"{'ok  ' if passed else 'FAIL'} {name}")
    print(
        json.dumps(
            {
                "benchmark": "tf_serving_compat",
                **machine,
                "written_by": written["tensorflow"],
                "served_by": side["tensorflow"],
                "served_by_tensorflow_text": side["tensorflow_text"],
                "ops": side["ops"],
                "unknown_ops": side["unknown_ops"],
                "signatures": sorted(["serving_default", *written["signatures"]]),
                **checks,
            }
        )
    )
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
