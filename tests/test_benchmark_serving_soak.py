"""benchmarks/serving_soak.py --latency: rejected requests are counted apart and never in the
latency (a fake session on a fake clock, where a served request takes 5 s and a rejected one
none), and the command on a tiny export writes every documented field of its JSON line."""

import json
import types

import numpy as np

from benchmarks import common
from benchmarks import serving_soak as soak


class InvalidArgumentError(Exception):
    def __init__(self, message):
        super().__init__(message)
        self.message = message


class FakeServer:
    """Serves in 5 s of the fake clock; fails beam_size=0 at once, as the export does."""

    tf = types.SimpleNamespace(
        errors=types.SimpleNamespace(InvalidArgumentError=InvalidArgumentError)
    )

    def __init__(self):
        self.now = 0.0
        self.batches = []

    def clock(self):
        return self.now

    def predict(self, texts, settings):
        if settings["beam_size"] == 0:
            raise InvalidArgumentError("beam_size=0 is out of range: it must be in [1, 4]")
        self.batches.append((list(texts), dict(settings)))
        self.now += 5.0
        return {"translation": np.array([t.upper() for t in texts])}


def _args(**overrides):
    values = dict(requests=12, time_limit=1e9, beam_size=4, alpha=0.6, reject_every=3)
    return types.SimpleNamespace(**{**values, **overrides})


def test_rejected_requests_are_counted_apart_and_not_in_the_latency(monkeypatch):
    server = FakeServer()
    monkeypatch.setattr(soak.time, "perf_counter", server.clock)
    sources = [b"one", b"two", b"three", b"four", b"five"]
    row = soak.latency_cell(server, sources, batch_size=2, clients=1, args=_args())
    # Tickets 2, 5, 8, 11 (every 3rd of 12) carry beam_size=0 and fail.
    assert (row["requests"], row["served"], row["rejected"], row["errors"]) == (12, 8, 4, 0)
    assert row["latency_samples"] == 8
    # Every latency is a served request's 5 s; a rejection in it would make the minimum 0.
    assert row["min_ms"] == row["p50_ms"] == row["p99_ms"] == row["max_ms"] == 5000.0
    # 8 requests of 2 sentences in 40 s of the clock (rejections take none of it).
    assert (row["seconds"], row["requests_per_s"], row["sentences_per_s"]) == (40.0, 0.2, 0.4)
    assert row["stopped_by_time_limit"] is False
    assert len(row["load_before"]) == len(row["load_after"]) == 3
    # One batch size and one beam per measurement; ticket t sends sentences 2t and 2t+1 of
    # the pool, wrapping round: the served tickets are 0, 1, 3, 4, 6, ...
    assert {len(texts) for texts, _ in server.batches} == {2}
    assert {(s["beam_size"], s["alpha"]) for _, s in server.batches} == {(4, 0.6)}
    assert [texts for texts, _ in server.batches[:3]] == [
        [b"one", b"two"],
        [b"three", b"four"],
        [b"two", b"three"],
    ]


def test_a_rejection_that_is_served_or_a_wrong_row_count_is_an_error(monkeypatch):
    server = FakeServer()
    server.predict = lambda texts, settings: {"translation": np.array(["x"])}
    row = soak.latency_cell(server, [b"a", b"b"], batch_size=2, clients=2, args=_args(requests=1))
    # 4 per client at least: 8 requests, each an error (a row short, or beam_size=0 served).
    assert (row["requests"], row["served"], row["errors"]) == (8, 0, 8)
    assert row["p50_ms"] is None and row["latency_samples"] == 0
    assert any("expected InvalidArgument" in e or "rows for" in e for e in row["first_errors"])


def test_latency_command_on_a_tiny_export(tmp_path):
    source = tmp_path / "source.txt"
    source.write_text("four hundred twenty-one\n\nhalf past seven\none red dog\n", encoding="utf-8")
    process = common.run_module(
        "benchmarks.serving_soak",
        "--latency",
        "--source-file",
        source,
        "--batch-sizes",
        "1,2",
        "--clients",
        "1,2",
        "--beam-size",
        "2",
        "--requests",
        "8",
        "--reject-every",
        "4",
        "--rounds",
        "2",
        timeout=900,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    result = json.loads(process.stdout.strip().splitlines()[-1])
    assert (result["benchmark"], result["mode"]) == ("serving_soak", "latency")
    assert result["sentences_in_pool"] == 3  # the blank line is no sentence
    assert len(result["load_start"]) == len(result["load_end"]) == 3
    assert {"cpu", "cpu_flags", "cpus", "versions"} <= set(result)
    cells = [(r["round"], r["batch_size"], r["clients"]) for r in result["rows"]]
    assert cells == [(i, b, c) for i in (0, 1) for b in (1, 2) for c in (1, 2)]
    for row in result["rows"]:
        assert (row["beam_size"], row["alpha"]) == (2, 0.6)
        assert (row["requests"], row["rejected"], row["served"], row["errors"]) == (8, 2, 6, 0)
        assert row["latency_samples"] == row["served"]
        assert row["min_ms"] <= row["p50_ms"] <= row["p90_ms"] <= row["p99_ms"] <= row["max_ms"]
        # Served requests carry batch_size sentences each (both rates rounded to 0.01).
        expected = row["requests_per_s"] * row["batch_size"]
        assert abs(row["sentences_per_s"] - expected) <= 0.01 * row["batch_size"]


def test_the_soak_has_a_request_for_every_signature_an_export_has(shared_export):
    exported = set(shared_export.loaded.signatures) - {"serving_default"}
    assert exported == set(soak.OTHER_SIGNATURES)
    texts = [b"one red dog", b"\xff\xfe", b""]
    for name in soak.OTHER_SIGNATURES:
        inputs = soak.signature_inputs(name, texts)
        assert all(len(value) == len(texts) for value in inputs.values() if np.ndim(value))
        if "source_ids" in inputs:  # [batch, length], even for an empty batch
            assert soak.signature_inputs(name, [])["source_ids"].shape == (0, 8)
            assert inputs["source_ids"][0].tolist() == [4 + b % 96 for b in b"one red"] + [3]


def test_an_output_row_is_the_same_in_any_batch():
    alone = {
        "output_ids": np.array([[[7, 3]]]),
        "scores": np.array([[-1.23456]]),
        "translation": np.array([b"ok"]),
    }
    batched = {
        "output_ids": np.array([[[5, 6, 7, 3], [5, 3, 0, 0]], [[7, 3, 0, 0], [8, 3, 0, 0]]]),
        "scores": np.array([[-0.5, -0.7], [-1.23461, -2.0]]),
        "translation": np.array([b"\xff", b"ok"]),
    }
    assert soak.output_row(batched, 1) == {
        "output_ids": [[7, 3], [8, 3]],
        "scores": [-1.235, -2.0],
        "translation": "ok",
    }
    assert soak.output_row(alone, 0)["output_ids"] == [[7, 3]]
    assert soak.output_row(batched, 0)["translation"] == "\\xff"


def test_the_loaders_own_signature_is_no_request():
    keys = ["__saved_model_init_op", "serving_default", "translate", "score_pairs"]
    assert soak.request_signatures(keys) == ["score_pairs", "translate"]
