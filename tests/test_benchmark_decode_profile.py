"""benchmarks/micro/decode_profile.py: each kernel goes to the part of the search its name says,
and a profiled translation's JSON line shares out all of the kernel time."""

import json

import pytest

from benchmarks.micro import decode_profile
from tests._decoding_fixtures import SENTENCES, tiny_copy_run_folder

LOOP = "Translator._search/while/body/_1/while"
PARTS = {
    "step: matmuls",
    "step: cache writes",
    "step: other",
    "beam: cache reorder",
    "beam: top-k",
    "beam: other",
    "encoder and cross-attention keys/values",
    "between segments: cache growth",
    "outside: other",
}


@pytest.mark.parametrize(
    "op_name, op_type, part",
    [
        (f"{LOOP}/decoder/layer_0/self_attention/query/MatMul", "_MklMatMul", "step: matmuls"),
        (f"{LOOP}/MatMul_1", "MatMul", "step: matmuls"),  # the output projection
        (
            f"{LOOP}/decoder/layer_0/self_attention/TensorScatterUpdate",
            "TensorScatterUpdate",
            "step: cache writes",
        ),
        (f"{LOOP}/decoder/layer_1/norm_1/Rsqrt", "Rsqrt", "step: other"),
        (f"{LOOP}/LogSoftmax", "LogSoftmax", "step: other"),
        (f"{LOOP}/GatherV2_3", "GatherV2", "beam: cache reorder"),
        (f"{LOOP}/TopKV2", "TopKV2", "beam: top-k"),
        (f"{LOOP}/Where", "Where", "beam: other"),
        (
            "Translator._search/encoder/layer_0/feed_forward/MatMul",
            "_MklMatMul",
            "encoder and cross-attention keys/values",
        ),
        ("Translator._search/cond/ConcatV2", "ConcatV2", "between segments: cache growth"),
        ("Translator._search/Cast", "Cast", "outside: other"),
    ],
)
def test_each_kernel_goes_to_the_part_its_name_says(op_name, op_type, part):
    assert decode_profile.category(op_name, op_type) == part


def test_top_op_types_are_the_slowest_op_types_of_any_part():
    by_type = {
        ("step: matmuls", "_MklMatMul"): (548.0, 329),
        ("step: cache writes", "TensorScatterUpdate"): (285.0, 2632),
        ("beam: other", "AddV2"): (38.0, 5272),
        ("step: other", "AddV2"): (8.0, 6759),
    }
    assert decode_profile.top_op_types(by_type, 3) == [
        ("step: matmuls", "_MklMatMul", 548.0, 329),
        ("step: cache writes", "TensorScatterUpdate", 285.0, 2632),
        ("beam: other", "AddV2", 38.0, 5272),
    ]


def test_the_json_line_shares_out_the_kernel_time_of_a_profiled_translation(
    tmp_path_factory, tmp_path, capsys
):
    run = tiny_copy_run_folder(tmp_path_factory)
    source = tmp_path / "source.txt"
    source.write_text("\n".join(SENTENCES[:3]) + "\n", encoding="utf-8")
    decode_profile.main(["--trained", str(run), "--source-file", str(source), "--beam-size", "2"])
    out = capsys.readouterr().out.strip().splitlines()
    record = json.loads(out[-1])
    assert record["benchmark"] == "decode_profile" and record["lines"] == 3
    assert record["beam_size"] == 2 and record["seconds_unprofiled"] > 0
    parts = set(record["op_ms"])
    assert parts <= PARTS
    # A beam search of a Transformer multiplies matrices, writes and reorders its caches and
    # takes a top-k at every step, after encoding the source outside the loop. (A part of a
    # few kernels, such as the caches' growth, may round to 0.0 ms.)
    every_search = {
        "step: matmuls",
        "step: cache writes",
        "step: other",
        "beam: cache reorder",
        "beam: top-k",
        "encoder and cross-attention keys/values",
    }
    assert all(record["op_ms"].get(part, 0) > 0 for part in every_search)
    assert sum(record["op_share"].values()) == pytest.approx(1.0, abs=1e-3)
    # Hundreds of kernels a step, over at least the steps of the longest output; the host
    # tracer records only a share of them, less on a loaded machine (1833 to 4399 here).
    assert record["kernels"] > 20 * max(len(s) for s in SENTENCES[:3])
    # The table: one line per part, the largest first.
    table = [line[:42].strip() for line in out if line[:42].strip() in parts]
    assert sorted(table) == sorted(parts)
    milliseconds = [record["op_ms"][part] for part in table]
    assert milliseconds == sorted(milliseconds, reverse=True)
    # The op types: slowest first, each within its part's time, the search's products among them.
    top = record["top_op_types"]
    assert len(top) == 15 and {row["part"] for row in top} <= PARTS
    assert [row["ms"] for row in top] == sorted((row["ms"] for row in top), reverse=True)
    assert all(row["ms"] <= record["op_ms"][row["part"]] + 0.1 for row in top)
    assert all(0 < row["kernels"] <= record["kernels"] for row in top)
    assert any(row["part"] == "step: matmuls" for row in top)
