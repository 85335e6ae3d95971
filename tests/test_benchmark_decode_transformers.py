"""benchmarks/decode_transformers.py at tiny widths: transformers' `generate` and our search
decode the same imported random weights to identical outputs, each row's ratio is the two
timings of the same run, and without transformers the benchmark skips it with one line."""

import json
import sys

import pytest

from benchmarks import decode_transformers as bench

TINY = ["--size", "tiny", "--vocab-size", "97", "--batch-sizes", "3,1", "--repeats", "1"]
TINY += ["--source-length", "7", "--output-length", "9"]


def test_ours_and_transformers_decode_the_imported_weights_alike(capsys):
    pytest.importorskip("transformers")
    assert bench.main(TINY) == 0
    out = capsys.readouterr().out.strip().splitlines()
    last = json.loads(out[-1])
    assert last["benchmark"] == "decode_transformers" and last["skipped_peers"] == {}
    rows = {(row["batch_size"], row["decoder"]): row for row in last["results"]}
    assert sorted(rows) == [
        (1, "ours (tf.function)"),
        (1, "ours (tf.function, XLA)"),
        (1, "transformers generate"),
        (3, "ours (tf.function)"),
        (3, "transformers generate"),
    ]
    for (batch_size, _), row in rows.items():
        # The same weights and search: every sentence's best output is transformers'.
        assert row["identical"] == 1.0, row
        reference = rows[(batch_size, "transformers generate")]
        assert row["vs_transformers"] == pytest.approx(
            reference["seconds"] / row["seconds"], rel=0.02, abs=0.002
        )
        assert row["sentences_per_second"] == pytest.approx(batch_size / row["seconds"], rel=0.02)


def test_the_decoders_force_the_requested_output_length():
    pytest.importorskip("transformers")
    hf_model = bench.marian_model(50, "tiny")
    model = bench.import_into_ours(hf_model)
    sources = bench.random_sources(2, 5, 49)
    sources[:, -1] = 0
    theirs = bench.transformers_search(hf_model, 2, 6)(sources)
    ours = bench.our_search(model, 2, 6, 5, jit=False)(sources)
    assert theirs.shape == ours.shape == (2, 6)
    # Neither side ends early (eos forbidden before the length) nor emits pad.
    assert not (theirs == 0).any() and not (theirs == 49).any()
    assert (ours == theirs).all()


def test_without_transformers_the_peer_is_skipped_with_one_line(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # its import now fails
    assert bench.main(TINY) == 0
    captured = capsys.readouterr()
    assert (
        [line for line in captured.err.splitlines() if "skipping peer" in line]
        == [
            line
            for line in captured.err.splitlines()
            if line.startswith("# skipping peer transformers")
        ]
        != []
    )
    last = json.loads(captured.out.strip().splitlines()[-1])
    assert last["results"] == [] and set(last["skipped_peers"]) == {"transformers"}
