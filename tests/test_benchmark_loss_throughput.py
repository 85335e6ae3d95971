"""benchmarks/micro/loss_throughput.py: both sides compute the same loss and gradients, and the
JSON line holds the headline figures."""

import json

from benchmarks.micro import loss_throughput as bench


def test_plain_and_fused_agree_and_the_json_line_holds_the_headline(capsys):
    headline = bench.main(
        [
            "--tokens",
            "96",
            "--d-model",
            "16",
            "--vocab",
            "300",
            "--chunks",
            "32",
            "200",
            "--steps",
            "1",
            "--repeats",
            "1",
        ]
    )
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last == json.loads(json.dumps(headline))
    for precision, bound in (("fp32", 1e-5), ("bf16", 3e-2)):
        rows = last[precision]["fused"]
        assert set(rows) == {"32", "200"}  # 3 chunks of 32; one chunk of the 96 tokens
        assert all(row["max_relative_difference"] < bound for row in rows.values())
        assert (
            last[precision]["over_plain"] == rows[str(last[precision]["best_chunk"])]["over_plain"]
        )


def test_plain_side_is_the_training_loss_of_the_logits():
    """The plain row times what TrainingModel computed before the fused loss: summed
    label-smoothed cross-entropy of float32 logits; checked against NumPy here."""
    import numpy as np

    hidden, matrix, labels = bench.make_inputs(32, 8, 50)
    loss = bench.make_step("plain", "float32", labels)(hidden, matrix)[0]
    logits = np.asarray(hidden, "float64") @ np.asarray(matrix.numpy(), "float64").T
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    ids = np.asarray(labels)
    target = np.full_like(log_probs, 0.1 / 50)
    np.put_along_axis(target, ids[..., None], 0.9 + 0.1 / 50, axis=-1)
    expected = -(target * log_probs).sum(-1)[ids != 0].sum()
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
