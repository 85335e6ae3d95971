"""benchmarks/decode_precision.py on a tiny model: the bfloat16 and int8 copies hold the
weights they should (checked against the float32 model and the layer count of the config),
the int8 copy's cached decoding step still agrees with its full decoder, and a whole run
writes one row per side and the JSON line last."""

import json

import keras
import numpy as np
import pytest
from keras import ops

from benchmarks import decode_precision as bench
from tests._decoding_fixtures import SENTENCES, tiny_model, tiny_run_folder, train_char_vocabulary


def logits(model, source_ids, target_ids):
    return ops.convert_to_numpy(
        model({"source_ids": source_ids, "target_ids": target_ids}, training=False)
    )


SOURCE = np.array([[5, 6, 7, 8, 3, 0], [9, 4, 3, 0, 0, 0]], "int32")
TARGET = np.array([[2, 5, 7, 6], [2, 8, 4, 9]], "int32")


def test_bfloat16_copy_holds_the_weights_in_bfloat16_and_its_logits_are_close():
    model = tiny_model(vocab_size=11, num_layers=2, sharpen=2.0)
    cast = bench.bfloat16_model(model)
    assert {weight.dtype for weight in cast.weights} == {"bfloat16"}
    for ours, theirs in zip(model.weights, cast.weights):
        expected = ops.convert_to_numpy(ops.cast(ours, "bfloat16")).astype("float32")
        np.testing.assert_array_equal(ops.convert_to_numpy(theirs).astype("float32"), expected)
    # bfloat16 keeps 8 bits of mantissa: logits of order 1-10 agree to a few hundredths.
    np.testing.assert_allclose(
        logits(cast, SOURCE, TARGET), logits(model, SOURCE, TARGET), atol=0.15, rtol=0.05
    )


def test_int8_copy_quantizes_every_dense_kernel_and_its_cached_step_agrees():
    num_layers = 1
    model = tiny_model(vocab_size=11, num_layers=num_layers, sharpen=2.0)
    quantized, paths = bench.int8_model(model)
    # Per layer: q, k, v, output and the two feed-forward kernels in the encoder; the
    # decoder has a second attention (4 more). The shared embedding is not a Dense layer.
    assert len(paths) == num_layers * 6 + num_layers * 10
    assert all(path.endswith("kernel") for path in paths)
    assert not any("embedding" in path for path in paths)
    full = logits(quantized, SOURCE, TARGET)
    # int8 weights (per-channel scales) and inputs: close to float32, not equal.
    np.testing.assert_allclose(full, logits(model, SOURCE, TARGET), atol=0.3, rtol=0.1)
    # The cached decoding step of the quantized copy gives what its full decoder gives.
    memory, memory_mask = quantized.encode(SOURCE)
    cache = quantized.init_cache(memory, TARGET.shape[1])
    for step in range(TARGET.shape[1]):
        step_logits, cache = quantized.decode_step(
            TARGET[:, step : step + 1], memory_mask, cache, step
        )
        np.testing.assert_allclose(ops.convert_to_numpy(step_logits), full[:, step], atol=1e-4)


def test_moses_lowercase_prepares_as_the_multi30k_pipeline():
    preparation = bench.MosesLowercase("en", "de")
    assert preparation.source("A Dog's ball, red.") == "a dog 's ball , red ."
    assert preparation.output("ein hund , rot .") == "ein hund, rot."


def test_ct2_sides_are_parsed_and_a_wrong_one_is_named():
    assert bench.parse_ct2("float32:mkl,int8:dnnl") == [("float32", "mkl"), ("int8", "dnnl")]
    with pytest.raises(SystemExit, match="'int4:dnnl'"):
        bench.parse_ct2("float32:mkl,int4:dnnl")


def test_a_run_has_one_row_per_side_and_the_json_line_last(tmp_path, capsys):
    keras.utils.set_random_seed(3)
    vocabulary = train_char_vocabulary(tmp_path)
    from keras_transformer.data.vocabulary import load_vocabulary

    size = load_vocabulary(vocabulary).size
    model = tiny_model(vocab_size=size, max_length=48, seed=21, sharpen=2.0)
    run = tiny_run_folder(tmp_path / "run", vocabulary, model)
    (tmp_path / "src.txt").write_text("\n".join(SENTENCES[:4]) + "\n")
    (tmp_path / "ref.txt").write_text("\n".join(SENTENCES[:4]) + "\n")
    pytest.importorskip("ctranslate2")  # its rows are half of the check: no run without them
    ct2 = "float32:mkl,int8:dnnl"
    args = ["--trained", run, "--source-file", tmp_path / "src.txt"]
    args += ["--reference-file", tmp_path / "ref.txt", "--repeats", "1", "--batch-size", "4"]
    args += ["--ours", "float32,int8"]  # the bfloat16 copy has its own test
    assert bench.main([str(a) for a in args] + ["--ct2", ct2]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["benchmark"] == "decode_precision" and last["lines"] == 4
    rows = {row["side"]: row for row in last["rows"]}
    assert set(rows) == {"ours float32", "ours int8", "ct2 float32", "ct2 int8"}
    assert rows["ct2 int8"]["compute_type"].startswith("int8")
    reference = rows["ours float32"]
    assert reference["identical_to_ours_float32"] == 1.0 and reference["bleu_change"] == 0.0
    assert rows["ours int8"]["int8_variables"] == 16  # one layer: 6 + 10 Dense kernels
    for row in rows.values():
        assert row["bleu_change"] == pytest.approx(row["bleu"] - reference["bleu"], abs=0.011)
        ratio = row["sentences_per_second"] / reference["sentences_per_second"]
        assert row["speed_vs_ours_float32"] == pytest.approx(ratio, rel=0.01, abs=6e-4)  # rounded
    headline = last["headline"]
    assert headline["int8_speed_vs_float32"] == rows["ours int8"]["speed_vs_ours_float32"]
    assert headline["int8_bleu_change"] == rows["ours int8"]["bleu_change"]
    assert headline["bfloat16_speed_vs_float32"] is None  # not run


def test_rows_count_the_outputs_identical_to_ours_in_float32():
    """The share of sentences each side translates as ours in float32 does, and the BLEU and
    speed against it, on outputs written here (3 of 4 the same, then 1 of 4)."""
    import types

    references = [
        "ein roter hund läuft über die straße",
        "es ist jetzt halb acht am abend",
        "wir sehen uns am dritten märz wieder",
        "vierhundert grüne flaschen stehen im regal",
    ]
    texts = {
        "ours float32": references,
        "ours int8": references[:3] + ["fünfhundert rote flaschen stehen hier"],
        "ct2 int8": ["x", "y", "z", references[3]],
    }
    sides = {name: {"texts": outputs, "tokens": 8, "notes": {}} for name, outputs in texts.items()}
    seconds = {"ours float32": 2.0, "ours int8": 1.0, "ct2 int8": 0.5}
    args = types.SimpleNamespace(
        texts=["s"] * 4, references=references, preparation=None, moses_language=None
    )
    rows = {row["side"]: row for row in bench.rows_of(sides, seconds, args)}
    assert rows["ours float32"]["identical_to_ours_float32"] == 1.0
    assert rows["ours int8"]["identical_to_ours_float32"] == 0.75
    assert rows["ct2 int8"]["identical_to_ours_float32"] == 0.25
    assert rows["ours int8"]["speed_vs_ours_float32"] == 2.0
    assert rows["ours float32"]["bleu"] == 100.0
    assert rows["ours int8"]["bleu_change"] == round(rows["ours int8"]["bleu"] - 100.0, 2) < 0
