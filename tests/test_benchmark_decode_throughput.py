"""benchmarks/decode_throughput.py in a tiny mode: every decoder's row, its ratio to
CTranslate2 measured in the same run, CTranslate2's greedy tokens equal to ours on the same
weights, a missing peer skipped with one line, and the JSON line last."""

import json

import pytest

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
