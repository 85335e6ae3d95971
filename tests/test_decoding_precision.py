"""Decoding precision: the CPU flags read from /proc/cpuinfo, bf16 refused where the CPU
lacks AVX512-BF16 and AMX, and the bfloat16 copy the Translator decodes with."""

import numpy as np
import pytest
from keras import ops

from keras_transformer.decoding import precision
from keras_transformer.errors import UserInputError
from tests._decoding_fixtures import SENTENCES, tiny_model, tiny_run_folder, train_char_vocabulary

CPUINFO = """processor\t: 0
model name\t: Some CPU
flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni

processor\t: 1
flags\t\t: fpu
"""


def test_cpu_flags_are_those_of_the_first_cpu(tmp_path):
    (tmp_path / "cpuinfo").write_text(CPUINFO)
    flags = precision.cpu_flags(tmp_path / "cpuinfo")
    assert flags == {"fpu", "sse2", "avx2", "avx512f", "avx512_bf16", "avx512_vnni"}
    assert precision.cpu_flags(tmp_path / "missing") == frozenset()


def test_bf16_is_refused_without_avx512_bf16_or_amx_and_int8_points_to_ctranslate2():
    with pytest.raises(UserInputError, match="avx512_bf16 or amx_bf16"):
        precision.check_precision("bf16", flags={"avx2", "avx512f"})
    precision.check_precision("bf16", flags={"avx512_bf16"})
    precision.check_precision("bf16", flags={"amx_bf16"})
    precision.check_precision("float32", flags=set())
    with pytest.raises(UserInputError, match="--format ctranslate2"):
        precision.check_precision("int8", flags={"avx512_vnni"})


def test_bf16_copy_holds_the_weights_cast():
    model = tiny_model(vocab_size=11, sharpen=2.0)
    assert precision.with_precision(model, "float32", flags=set()) is model
    cast = precision.with_precision(model, "bf16", flags={"avx512_bf16"})
    assert {weight.dtype for weight in cast.weights} == {"bfloat16"}
    for ours, theirs in zip(model.weights, cast.weights):
        expected = ops.convert_to_numpy(ops.cast(ours, "bfloat16")).astype("float32")
        np.testing.assert_array_equal(ops.convert_to_numpy(theirs).astype("float32"), expected)


def test_translator_load_with_bf16(tmp_path, monkeypatch):
    from keras_transformer import Translator
    from keras_transformer.data.vocabulary import load_vocabulary

    vocabulary = train_char_vocabulary(tmp_path)
    size = load_vocabulary(vocabulary).size
    run = tiny_run_folder(tmp_path / "run", vocabulary, tiny_model(size, 48, 21, 2.0))
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2"}))
    with pytest.raises(UserInputError, match="leave --precision out"):
        Translator.load(run, precision="bf16")
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    translator = Translator.load(run, precision="bf16", beam_size=2)
    assert {weight.dtype for weight in translator.model.weights} == {"bfloat16"}
    reference = Translator.load(run, beam_size=2).translate(SENTENCES[:4])
    outputs = translator.translate(SENTENCES[:4])
    # bfloat16 logits differ from float32 in the third digit: most outputs are the same.
    assert sum(a == b for a, b in zip(outputs, reference)) >= 3


def test_translate_precision_int8_is_one_error_pointing_to_ctranslate2(tmp_path, capsys):
    from keras_transformer.cli import main

    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("a b\n")
    output.write_text("an earlier translation\n")
    command = ["translate", "--model", str(tmp_path / "run"), "-i", str(source), "-o", str(output)]
    assert main([*command, "--overwrite", "--precision", "int8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "usage:" not in err
    assert "'int8'" in err and "export --format ctranslate2 --quantization int8" in err
    assert output.read_text() == "an earlier translation\n"
