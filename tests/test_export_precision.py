"""`keras-transformer export --precision bf16`: refused before the model loads on a CPU
without AVX512-BF16 or AMX, a saved_model option only, and a SavedModel whose weights and
matmuls are bfloat16 and which translates as `Translator.load(precision="bf16")`."""

import json

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from keras_transformer import translation
from keras_transformer.cli import main
from keras_transformer.decoding import precision
from keras_transformer.translation import Translator
from tests._decoding_fixtures import SENTENCES, tiny_copy_run_folder

# One beam width keeps the export short (each width up to --max-beam-size is a search
# compiled into the graph).
SETTINGS = {"beam_size": 1, "alpha": 0.6, "max_extra_length": 4}
OPTIONS = ["--max-beam-size", "1"] + [
    arg for key, value in SETTINGS.items() for arg in ("--" + key.replace("_", "-"), str(value))
]
# Flags of a CPU without bfloat16 instructions, and of one with them.
PLAIN_CPU = frozenset({"sse4_2", "avx2", "avx512f", "avx512_vnni"})
BF16_CPU = PLAIN_CPU | {"avx512_bf16"}


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    return tiny_copy_run_folder(tmp_path_factory)


def _cpu(monkeypatch, flags):
    monkeypatch.setattr(precision, "cpu_flags", lambda cpuinfo="/proc/cpuinfo": flags)


def _error_line(capsys):
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("keras-transformer export: error: "), err
    return lines[0]


def test_bf16_on_a_cpu_without_bf16_instructions_is_refused_before_the_load(
    run_folder, tmp_path, monkeypatch, capsys
):
    _cpu(monkeypatch, PLAIN_CPU)
    loads = []
    monkeypatch.setattr(translation, "load_model", lambda *args, **kwargs: loads.append(args))
    base = tmp_path / "saved_models"
    common = ["export", "--model", str(run_folder), "--name", "tiny", "--base-dir", str(base)]
    assert main([*common, *OPTIONS, "--precision", "bf16"]) == 2
    line = _error_line(capsys)
    assert "avx512_bf16 or amx_bf16" in line and "this machine's CPU" in line
    assert "serves the model needs one of them too" in line and "leave --precision out" in line
    # int8 is CTranslate2's: the error says how to get it.
    assert main([*common, *OPTIONS, "--precision", "int8"]) == 2
    assert "--format ctranslate2 --quantization int8" in _error_line(capsys)
    assert loads == [] and not base.exists()


def test_precision_is_a_saved_model_option(run_folder, tmp_path, monkeypatch, capsys):
    _cpu(monkeypatch, BF16_CPU)
    output = tmp_path / "ct2"
    argv = ["export", "--model", str(run_folder), "--format", "ctranslate2", "--output"]
    assert main([*argv, str(output), "--precision", "bf16"]) == 2
    line = _error_line(capsys)
    assert "--precision does not apply to --format ctranslate2: leave it out" in line
    assert not output.exists()


def _graph_matmul_types(saved_model_dir):
    """The dtypes of the MatMul / BatchMatMulV2 / Einsum nodes of the SavedModel's graph."""
    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString((saved_model_dir / "saved_model.pb").read_bytes())
    graph = saved_model.meta_graphs[0].graph_def
    nodes = [node for function in graph.library.function for node in function.node_def]
    return {
        tf.dtypes.as_dtype(node.attr["T"].type).name
        for node in [*graph.node, *nodes]
        if node.op in ("MatMul", "BatchMatMulV2", "Einsum")
    }


def _serve(loaded, texts):
    inputs = {"text": tf.constant(texts), "num_hypotheses": tf.constant(1)}
    inputs["length_penalty"] = tf.constant("gnmt")
    inputs.update({key: tf.constant(value) for key, value in SETTINGS.items()})
    inputs["alpha"] = tf.constant(SETTINGS["alpha"], tf.float32)
    outputs = loaded.signatures["serving_default"](**inputs)
    return [text.decode() for text in outputs["translation"].numpy()], outputs["score"].numpy()


def _search_scores(translator, texts):
    rows = [translator.vocabulary.encode(text) + [translator.decoder.eos_id] for text in texts]
    width = max(len(row) for row in rows)
    padded = np.array([row + [0] * (width - len(row)) for row in rows], "int32")
    return translator.translate_ids(padded)[3][:, 0]


def test_bf16_export_holds_bfloat16_and_translates_as_the_bf16_translator(
    run_folder, tmp_path, monkeypatch, capsys
):
    _cpu(monkeypatch, BF16_CPU)
    base = tmp_path / "saved_models"
    argv = ["export", "--model", str(run_folder), "--name", "tiny", "--base-dir", str(base)]
    assert main([*argv, *OPTIONS, "--precision", "bf16"]) == 0
    path = base / "tiny" / "1"
    assert f"to {path}" in capsys.readouterr().out
    with open(path / "assets.extra" / "keras_transformer.json") as file:
        assert json.load(file)["precision"] == "bf16"
    # The weights are stored, and the products computed, in bfloat16: a float32 export
    # (--precision ignored) has float32 variables and float32 matmuls only.
    reader = tf.train.load_checkpoint(str(path / "variables" / "variables"))
    weights = {
        name: dtype.name
        for name, dtype in reader.get_variable_to_dtype_map().items()
        if dtype != tf.string and not name.startswith(("_CHECKPOINTABLE", "save_counter"))
    }
    assert weights and set(weights.values()) == {"bfloat16"}, weights
    assert "bfloat16" in _graph_matmul_types(path)

    texts = SENTENCES[:4]
    loaded = tf.saved_model.load(str(path))  # kept: its functions need its variables alive
    served, served_scores = _serve(loaded, texts)
    bf16 = Translator.load(str(run_folder), precision="bf16", **SETTINGS)
    float32 = Translator.load(str(run_folder), **SETTINGS)
    assert served == bf16.translate(texts)
    # The served scores are the bf16 translator's, not the float32 one's (bfloat16 rounding
    # moves this model's scores by about 1e-2).
    bf16_scores, float32_scores = _search_scores(bf16, texts), _search_scores(float32, texts)
    np.testing.assert_allclose(served_scores, bf16_scores, rtol=0, atol=1e-3)
    assert np.abs(served_scores - float32_scores).max() > 5e-3
