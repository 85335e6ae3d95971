"""`train()` under MirroredStrategy (2 logical CPUs) against `train()` on one device, on the
same global batches: the loss of every update agrees, and so do the weights.

The same global batches: each replica's token budget is half the one device's, and the
budgets divide by every bucket's longest length (max_length 8: buckets of at most 7 and 8
tokens, per-replica budget 56), so that both pipelines cut the same batches from the same
shuffled stream; the mirrored run splits each of them in halves. Dropout 0: a replica's masks
for half a batch are not the rows of the masks one device draws for the whole batch.
"""

import json
import subprocess
import textwrap

import numpy as np
import pytest

from tests._strategy_fixtures import STEP_LOSSES
from tests._training_fixtures import (
    PYTHON,
    REPO,
    subprocess_env,
    tiny_config,
    write_config,
    write_reverse_corpus,
)

TRAIN_STEPS = 6

SCRIPT = STEP_LOSSES + textwrap.dedent("""
    import sys
    from keras_transformer.training import make_strategy
    make_strategy("mirrored", num_devices=2)  # before any other TensorFlow op
    import numpy as np
    from keras_transformer.training import train

    for name, config in zip(("mirrored", "one_device"), sys.argv[1:3]):
        losses = StepLosses()
        result = train(config, callbacks=[losses])
        np.savez(f"{sys.argv[3]}/{name}.npz", losses=losses.losses,
                 names=[weight.path for weight in result.model.weights],
                 replicas=result.num_replicas, accumulation=result.accumulation_steps,
                 **{f"initial-{i:03d}": w for i, w in enumerate(losses.initial)},
                 **{f"final-{i:03d}": w for i, w in enumerate(result.model.get_weights())})
""")


def _config(output_dir, corpus, strategy, token_budget):
    return tiny_config(
        output_dir,
        corpus,
        strategy=strategy,
        num_devices=2 if strategy == "mirrored" else None,
        data={"dev": None, "max_length": 8, "token_budget": token_budget},
        schedule={
            "train_steps": TRAIN_STEPS,
            "eval_every_steps": TRAIN_STEPS,
            # Two micro-batches of 112 tokens per update on either side.
            "tokens_per_update": 224,
        },
        checkpoints={"every_steps": TRAIN_STEPS, "average_last": 0},
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    directory = tmp_path_factory.mktemp("mirrored-train")
    corpus = write_reverse_corpus(directory / "corpus", train_lines=300, dev_lines=4)
    mirrored = write_config(
        directory / "mirrored.json", _config(directory / "mirrored", corpus, "mirrored", 56)
    )
    one_device = write_config(
        directory / "one_device.json", _config(directory / "one", corpus, "auto", 112)
    )
    completed = subprocess.run(
        [PYTHON, "-c", SCRIPT, mirrored, one_device, str(directory)],
        capture_output=True,
        text=True,
        timeout=400,
        env=subprocess_env(),
        cwd=REPO,
    )
    assert completed.returncode == 0, completed.stderr[-6000:]
    results = {}
    for name in ("mirrored", "one_device"):
        saved = np.load(directory / f"{name}.npz")
        results[name] = {
            "losses": saved["losses"],
            "names": [str(name) for name in saved["names"]],
            "replicas": int(saved["replicas"]),
            "accumulation": int(saved["accumulation"]),
            "initial": [saved[k] for k in sorted(saved.files) if k.startswith("initial-")],
            "final": [saved[k] for k in sorted(saved.files) if k.startswith("final-")],
        }
    return results


def test_the_runs_are_two_replicas_and_one_with_the_same_updates(runs):
    mirrored, one_device = runs["mirrored"], runs["one_device"]
    assert (mirrored["replicas"], one_device["replicas"]) == (2, 1)
    assert mirrored["accumulation"] == one_device["accumulation"] == 2
    assert len(mirrored["losses"]) == len(one_device["losses"]) == TRAIN_STEPS
    # The same initial weights (the config's seed), so that what follows compares training.
    for a, b in zip(mirrored["initial"], one_device["initial"]):
        np.testing.assert_array_equal(a, b)


def test_every_update_has_the_loss_of_one_device(runs):
    mirrored, one_device = runs["mirrored"]["losses"], runs["one_device"]["losses"]
    print(json.dumps({"mirrored": mirrored.tolist(), "one_device": one_device.tolist()}))
    # The losses move from update to update (other batches, learning), so agreement at every
    # update is no accident; they differ by float32 rounding only (sums in another order).
    assert np.ptp(one_device) > 0.05
    np.testing.assert_allclose(mirrored, one_device, rtol=1e-5)


def test_the_weights_end_where_one_device_ends(runs):
    mirrored, one_device = runs["mirrored"], runs["one_device"]
    moved = max(
        float(np.max(np.abs(a - b))) for a, b in zip(one_device["initial"], one_device["final"])
    )
    differences = {
        name: float(np.max(np.abs(a - b)))
        for name, a, b in zip(mirrored["names"], mirrored["final"], one_device["final"])
    }
    print(json.dumps({"moved": moved, "differences": differences}))
    assert moved > 1e-2  # training changed the weights
    # Except the attention key biases: their gradient is zero in exact arithmetic (q.b_k is
    # the same for every key, and softmax ignores it), and Adam divides their rounding noise
    # by its own size, which makes full-size steps either way. Nothing else depends on them.
    compared = {name: d for name, d in differences.items() if not name.endswith("/key/bias")}
    assert len(compared) == len(differences) - 3  # three attentions
    assert max(compared.values()) < 1e-4 * moved
