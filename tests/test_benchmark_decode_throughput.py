"""benchmarks/decode_throughput.py in a tiny mode: every decoder's row, its ratio to
CTranslate2 measured in the same run, CTranslate2's greedy tokens equal to ours on the same
weights, a missing peer skipped with one line, and the JSON line last."""

import json

import pytest

from benchmarks import ct2_worker, decode_trained
from benchmarks import decode_throughput as bench

TINY = [
    "--configs",
    "tiny",
    "--nocache-configs",
    "tiny",
    "--vocab-size",
    "64",
    "--batch-size",
    "2",
    "--source-length",
    "6",
    "--lengths",
    "9",
    "--scaling-lengths",
    "",
    "--repeats",
    "1",
]


def test_every_decoder_has_a_row_and_a_ratio_to_ctranslate2(capsys):
    pytest.importorskip("ctranslate2")
    pytest.importorskip("keras_hub")
    bench.main([*TINY, "--peers", "ours,nocache,kerashub,ct2"])
    out = capsys.readouterr().out.strip().splitlines()
    last = json.loads(out[-1])
    assert last["benchmark"] == "decode_throughput" and last["skipped_peers"] == {}
    assert set(last["cpu_flags"]) <= {
        "avx2",
        "fma",
        "avx512f",
        "avx512_bf16",
        "avx512_vnni",
        "amx_bf16",
        "amx_tile",
    }
    rows = {row["decoder"]: row for row in last["results"]}
    assert set(rows) == {
        "ours (tf.function)",
        "ours without cache",
        "keras-hub BeamSampler",
        "CTranslate2",
    }
    reference = rows["CTranslate2"]["tokens_per_second"]
    for row in rows.values():
        # Every sentence gets exactly 9 generated tokens (the length is forced).
        # (tokens/s and sentences/s are rounded to 1 and 2 decimals in the JSON line)
        assert row["tokens_per_second"] == pytest.approx(9 * row["sentences_per_second"], abs=0.1)
        # Rounded to 3 decimals in the JSON line, as the rates to 1.
        ratio = row["tokens_per_second"] / reference
        assert row["vs_ctranslate2"] == pytest.approx(ratio, rel=0.01, abs=1e-3)
    # The converted model is the same function: CTranslate2 decodes ours token for token.
    assert last["ct2_greedy_agreement"] == {"tiny": 1.0}


def test_a_missing_peer_is_one_line_and_no_row(capsys, monkeypatch):
    monkeypatch.setitem(bench.PEER_MODULES, "ct2", "no_such_module_kt")
    bench.main([*TINY, "--peers", "ours,ct2"])
    out, err = capsys.readouterr()
    last = json.loads(out.strip().splitlines()[-1])
    assert last["skipped_peers"] == {"ct2": "No module named 'no_such_module_kt'"}
    assert [line for line in err.splitlines() if line.startswith("# skipping peer")] == [
        "# skipping peer ct2: No module named 'no_such_module_kt' "
        '(pip install -e ".[bench]" installs every peer)'
    ]
    assert [row["decoder"] for row in last["results"]] == ["ours (tf.function)"]
    assert "vs_ctranslate2" not in last["results"][0]


# -- a trained model on real text ---------------------------------------------------------------


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A run folder of a tiny sharpened model whose CTranslate2 export decodes as ours does,
    and the sentences it translates."""
    pytest.importorskip("ctranslate2")
    from keras_transformer.data.vocabulary import load_vocabulary
    from tests._decoding_fixtures import SENTENCES, tiny_run_folder, train_char_vocabulary
    from tests.test_export_ctranslate2 import random_model

    folder = tmp_path_factory.mktemp("trained")
    vocabulary = train_char_vocabulary(folder)
    size = load_vocabulary(vocabulary).size  # the export needs the model's size equal to it
    run = tiny_run_folder(folder / "run", vocabulary, random_model(size, max_length=64))
    source = folder / "sources.txt"
    source.write_text("\n".join(SENTENCES) + "\n")
    return run, source, SENTENCES


def trained_json(run, source, capsys, *options):
    bench.main(["--trained", str(run), "--source-file", str(source), "--repeats", "1", *options])
    out = capsys.readouterr().out.strip().splitlines()
    return out, json.loads(out[-1])


def test_trained_rows_every_side_batch_one_and_larger(trained_run, capsys, monkeypatch, tmp_path):
    from keras_transformer import Translator
    from keras_transformer.decoding import precision as precisions

    # The bf16 rows on every machine: a CPU with AVX512-BF16 pretended (TensorFlow runs
    # bfloat16 without it, only slower), so that an AVX2 machine checks them too.
    flags = frozenset({"avx2", "fma", "avx512f", "avx512_bf16"})
    monkeypatch.setattr(precisions, "cpu_flags", lambda cpuinfo="/proc/cpuinfo": flags)
    run, _, _ = trained_run
    # Beam 2: the SavedModel compiles one search per width up to the beam, so a narrow beam
    # keeps the export short. Every side compiles a search per batch shape: four lines of one
    # width (6 pieces with eos) give two shapes, batch 1 and batch 3, where lines of other
    # widths would give a shape each.
    sentences = ["a dog", "hello", "green", "a cat"]
    source = tmp_path / "sources.txt"
    source.write_text("\n".join(sentences) + "\n")
    _, last = trained_json(
        run, source, capsys, "--lines", "4", "--trained-batch-sizes", "1,3", "--beam-size", "2"
    )
    trained = last["trained"]
    assert last["results"] == [] and last["scaling"] == []  # --trained alone: one case
    assert trained["lines"] == len(sentences)
    rows = {(r["decoder"], r["batch_size"], r["precision"], r["alpha"]): r for r in trained["rows"]}
    expected = {
        ("ours (Translator)", "fp32", 0.0),
        ("ours (Translator)", "fp32", 0.6),
        ("SavedModel (serving_default)", "fp32", 0.0),
        ("CTranslate2", "fp32", 0.0),
        ("CTranslate2", "int8", 0.0),
        ("ours (Translator)", "bf16", 0.0),
    }
    # XLA compiles one-sentence batches only: its row is at batch size 1.
    assert set(rows) == {(d, b, p, a) for d, p, a in expected for b in (1, 3)} | {
        ("ours (Translator, XLA)", 1, "fp32", 0.0)
    }
    # The library has no int8 (CTranslate2's is the int8 path): the slot is listed with its
    # reason, not a row.
    assert set(trained["skipped_rows"]) == {"ours (Translator) int8"}
    # Each CTranslate2 precision in its own worker, on the library fastest for it.
    backends = {(r["decoder"], r["precision"]): r["backend"] for r in trained["rows"]}
    assert backends[("CTranslate2", "fp32")] == ct2_worker.ct2_library("float32")
    assert backends[("CTranslate2", "int8")] == ct2_worker.ct2_library("int8")
    assert backends[("ours (Translator)", "fp32")] == "tensorflow"
    # Tokens per sentence: the pieces of ours at alpha 0 (translated here alone) plus eos.
    ours = Translator.load(str(run), beam_size=2, alpha=0.0).translate(sentences)
    vocabulary = Translator.load(str(run)).vocabulary
    per_sentence = sum(len(vocabulary.encode(t)) + 1 for t in ours) / len(sentences)
    for (_, batch_size, precision, alpha), row in rows.items():
        assert ("latency_p50_ms" in row) == (batch_size == 1)
        if batch_size == 1:
            assert 0 < row["latency_p50_ms"] <= row["latency_p90_ms"]
        # bf16 is set against CTranslate2's reduced precision, int8; the rest like for like.
        counterpart = "int8" if precision == "bf16" else precision
        assert row["vs_ctranslate2_precision"] == counterpart
        reference = rows[("CTranslate2", batch_size, counterpart, 0.0)]
        ratio = row["sentences_per_second"] / reference["sentences_per_second"]
        assert row["sentences_vs_ctranslate2"] == pytest.approx(ratio, rel=0.01, abs=1e-3)
        if precision == "fp32" and alpha == 0.0:
            # The same outputs on every faithful side and at every batch size.
            assert row["identical_to_ours"] == 1.0
            assert row["tokens_per_second"] == pytest.approx(
                per_sentence * row["sentences_per_second"], rel=0.01
            )
    assert trained["identical_to_ctranslate2"] == 1.0 and trained["first_differences"] == []
    assert trained["max_extra_length"] == 50 and trained["beam_size"] == 2
    assert len(trained["load_average"]["before"]) == 3
    assert last["cpu"] and "commit" in last


def test_trained_identical_share_counts_a_changed_output(trained_run, capsys, monkeypatch):
    """CTranslate2's output changed on one sentence of 4: 3/4 identical, under 98%, so the
    differing sentence is printed and kept in the JSON line."""
    run, source, sentences = trained_run
    original = decode_trained.TrainedSides.ctranslate2

    def one_changed(self, precision, batch_size):
        translate = original(self, precision, batch_size)

        def changed(lines):
            outputs = translate(lines)
            return ["changed" if line == sentences[1] else o for line, o in zip(lines, outputs)]

        return changed

    monkeypatch.setattr(decode_trained.TrainedSides, "ctranslate2", one_changed)
    out, last = trained_json(
        run,
        source,
        capsys,
        "--beam-size",
        "2",
        "--peers",
        "ours,ct2",
        "--precisions",
        "fp32",
        "--trained-batch-sizes",
        "3",
        "--lines",
        "4",
    )
    trained = last["trained"]
    assert trained["identical_to_ctranslate2"] == 0.75
    (difference,) = trained["first_differences"]
    assert difference["source"] == sentences[1] and difference["ctranslate2"] == "changed"
    assert "# under 98%: the first differences follow" in out
    assert [r["decoder"] for r in trained["rows"]] == [
        "ours (Translator)",
        "ours (Translator)",
        "CTranslate2",
    ]


def test_identical_share_and_source_preparation(tmp_path):
    import gzip

    assert decode_trained.identical_share(["a", "b", "c", "d"], ["a", "b", "x", "d"]) == 0.75
    with pytest.raises(ValueError, match="3 outputs against 2"):
        decode_trained.identical_share(["a", "b", "c"], ["a", "b"])
    path = tmp_path / "test.en.gz"
    with gzip.open(path, "wt", encoding="utf-8") as file:
        file.write('A man, in a "red" hat.\n\nTwo Dogs run.\nA third line.\n')
    # Blank lines are skipped; Multi30k's preparation lower-cases and Moses-tokenizes.
    assert decode_trained.read_source_lines(path, 2, "lowercase+moses") == [
        'a man , in a " red " hat .',
        "two dogs run .",
    ]
    assert decode_trained.read_source_lines(path, 5) == [
        'A man, in a "red" hat.',
        "Two Dogs run.",
        "A third line.",
    ]
