"""Strategies: MirroredStrategy on 2 logical CPUs matches one device, in `fit` and in the
whole `train()`; two multi-worker processes on localhost train in lockstep and end where one
worker with two replicas ends.

Logical CPU devices must be configured before TensorFlow initialises, and a multi-worker
cluster needs separate processes, so both run in child interpreters: one child with two
logical CPUs runs every mirrored and one-device run (among them the one-worker reference of
the cluster), then the two workers run.

`train()` mirrored against one device on the same global batches: each replica's token budget
is half the one device's, and the budgets divide by every bucket's longest length (max_length
8: buckets of at most 7 and 8 tokens, per-replica budget 56), so that both pipelines cut the
same batches from the same shuffled stream; the mirrored run splits each of them in halves.
Dropout 0: a replica's masks for half a batch are not the rows of the masks one device draws
for the whole batch.
"""

import json
import os
import subprocess
import textwrap

import numpy as np
import pytest

from tests import _preloaded_python
from tests._strategy_fixtures import STEP_LOSSES, corpus_with_vocabulary, free_ports
from tests._training_fixtures import (
    PYTHON,
    REPO,
    subprocess_env,
    tiny_config,
    write_config,
    write_reverse_corpus,
)

MIRRORED_SCRIPT = STEP_LOSSES + textwrap.dedent("""
    import json, sys
    from keras_transformer.training import make_strategy
    mirrored = make_strategy("mirrored", num_devices=2)  # before any other TensorFlow op
    import keras, numpy as np, tensorflow as tf
    from keras_transformer import TransformerConfig, build_model
    from keras_transformer.training import TrainingModel, group_micro_batches, train

    # Untied embeddings: their gradients are pure IndexedSlices (keras-team/keras#21069).
    config = TransformerConfig(vocab_size=40, num_layers=1, d_model=32, d_ff=64, num_heads=4,
                               dropout=0.0, shared_embeddings="none")
    rng = np.random.default_rng(0)
    batches = []
    for batch, length in [(4, 5), (2, 7), (6, 3), (4, 6), (2, 4), (4, 8)] * 2:
        labels = rng.integers(4, 40, size=(batch, length)).astype("int32")
        labels[0, length // 2:] = 0
        target = np.concatenate([np.full((batch, 1), 2, "int32"), labels[:, :-1]], 1)
        batches.append(({"source_ids": labels[:, ::-1].copy(), "target_ids": target}, labels))
    spec = ({"source_ids": tf.TensorSpec([None, None], tf.int32),
             "target_ids": tf.TensorSpec([None, None], tf.int32)},
            tf.TensorSpec([None, None], tf.int32))
    data = group_micro_batches(
        tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec), 2)

    keras.utils.set_random_seed(7)
    initial = build_model(config).get_weights()

    def run(strategy):
        with strategy.scope():
            transformer = build_model(config)
            transformer.set_weights(initial)
            model = TrainingModel(transformer)
            # Plain SGD: Adam's first steps divide by |gradient|, which turns rounding noise
            # in near-zero gradients into full-size updates and hides real differences.
            optimizer = keras.optimizers.SGD(learning_rate=0.5)
            model.compile(optimizer=optimizer)
            optimizer.build(transformer.trainable_variables)
        history = model.fit(data, steps_per_epoch=3, epochs=2, verbose=0, shuffle=False)
        return history.history["loss"], transformer.get_weights()

    single_loss, single_weights = run(make_strategy("one_device"))
    mirrored_loss, mirrored_weights = run(mirrored)
    weight_difference = max(float(np.max(np.abs(a - b)))
                            for a, b in zip(single_weights, mirrored_weights))
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(initial, mirrored_weights))

    # The whole entry point under "mirrored": per-replica budgets, dev loss, checkpoints.
    entry_config, mirrored_config, one_device_config, folder = sys.argv[1:5]
    one_worker_config, one_worker_folder = sys.argv[5:7]
    result = train(entry_config)

    # train() mirrored and on one device, on the same global batches: every update's loss.
    for name, config in (("mirrored", mirrored_config), ("one_device", one_device_config)):
        losses = StepLosses()
        compared = train(config, callbacks=[losses])
        np.savez(f"{folder}/{name}.npz", losses=losses.losses,
                 names=[weight.path for weight in compared.model.weights],
                 replicas=compared.num_replicas, accumulation=compared.accumulation_steps,
                 **{f"initial-{i:03d}": w for i, w in enumerate(losses.initial)},
                 **{f"final-{i:03d}": w for i, w in enumerate(compared.model.get_weights())})

    # The multi-worker cluster's reference: one worker with the same 2 replicas.
    losses = StepLosses()
    one_worker = train(one_worker_config, callbacks=[losses])
    assert (one_worker.step, one_worker.num_replicas) == (3, 2), (
        one_worker.step, one_worker.num_replicas)
    np.savez(f"{one_worker_folder}/one_worker.npz", *one_worker.model.get_weights())
    np.savez(f"{one_worker_folder}/one_worker-steps.npz", *losses.initial, losses=losses.losses)

    print(json.dumps({
        "replicas": mirrored.num_replicas_in_sync, "single_loss": single_loss,
        "mirrored_loss": mirrored_loss, "weight_difference": weight_difference,
        "moved": moved, "train_replicas": result.num_replicas, "train_step": result.step,
        "train_history": result.history}))
""")


TRAIN_STEPS = 6  # of the mirrored and one-device train() runs compared update by update


def _compared_config(output_dir, corpus, strategy, token_budget):
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
def cluster_configs(tmp_path_factory):
    """The multi-worker cluster's config and that of its one-worker reference (the same 2
    replicas on 2 logical CPUs, so the same global batches; only the cluster differs)."""
    tmp_path = tmp_path_factory.mktemp("multi_worker")
    corpus, vocabulary = corpus_with_vocabulary(tmp_path, dev_lines=20)
    config = tiny_config(
        tmp_path / "run",
        corpus,
        strategy="multi_worker",
        data={"vocab": vocabulary, "dev": None},
        schedule={"train_steps": 3, "eval_every_steps": 3},
        checkpoints={"every_steps": 3},
    )
    one_worker = {**config, "strategy": "mirrored", "num_devices": 2}
    one_worker["output_dir"] = str(tmp_path / "one")
    return {
        "folder": tmp_path,
        "config": write_config(tmp_path / "config.json", config),
        "one_worker": write_config(tmp_path / "one_worker.json", one_worker),
    }


@pytest.fixture(scope="module")
def mirrored_run(tmp_path_factory, cluster_configs):
    """The child with two logical CPUs: fit and train() mirrored against one device, and the
    cluster's one-worker reference (its files written beside the cluster's)."""
    directory = tmp_path_factory.mktemp("mirrored")
    corpus = write_reverse_corpus(directory / "corpus", train_lines=200, dev_lines=400)
    config = write_config(
        directory / "config.json",
        tiny_config(
            directory / "run",
            corpus,
            strategy="mirrored",
            num_devices=2,
            schedule={"train_steps": 4, "eval_every_steps": 4},
            checkpoints={"every_steps": 2},
        ),
    )
    compared_corpus = write_reverse_corpus(directory / "compared", train_lines=300, dev_lines=4)
    compared = [
        write_config(
            directory / f"{name}.json",
            _compared_config(directory / name, compared_corpus, strategy, budget),
        )
        for name, strategy, budget in (("mirrored", "mirrored", 56), ("one", "auto", 112))
    ]
    script = directory / "mirrored.py"
    script.write_text(MIRRORED_SCRIPT)
    completed = _preloaded_python.run(
        [
            PYTHON,
            str(script),
            config,
            *compared,
            directory,
            cluster_configs["one_worker"],
            cluster_configs["folder"],
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=subprocess_env(),
        cwd=REPO,
    )
    assert completed.returncode == 0, completed.stderr[-6000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    result["run_dir"] = directory / "run"
    result["folder"] = directory
    return result


@pytest.fixture(scope="module")
def runs(mirrored_run):
    """The mirrored and one-device train() runs on the same global batches."""
    results = {}
    for name in ("mirrored", "one_device"):
        saved = np.load(mirrored_run["folder"] / f"{name}.npz")
        results[name] = {
            "losses": saved["losses"],
            "names": [str(name) for name in saved["names"]],
            "replicas": int(saved["replicas"]),
            "accumulation": int(saved["accumulation"]),
            "initial": [saved[k] for k in sorted(saved.files) if k.startswith("initial-")],
            "final": [saved[k] for k in sorted(saved.files) if k.startswith("final-")],
        }
    return results


def test_mirrored_two_cpus_matches_one_device(mirrored_run):
    assert mirrored_run["replicas"] == 2
    np.testing.assert_allclose(
        mirrored_run["mirrored_loss"], mirrored_run["single_loss"], rtol=1e-5
    )
    assert mirrored_run["weight_difference"] < 1e-5
    assert mirrored_run["moved"] > 1e-3  # training did change the weights


def test_train_entry_under_mirrored(mirrored_run):
    assert mirrored_run["train_replicas"] == 2
    assert mirrored_run["train_step"] == 4
    history = mirrored_run["train_history"]
    assert np.isfinite(history["loss"]).all() and np.isfinite(history["val_perplexity"]).all()
    checkpoints = sorted(os.listdir(mirrored_run["run_dir"] / "checkpoints"))
    assert "ckpt-2.index" in checkpoints and "ckpt-4.index" in checkpoints


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


WORKER_SCRIPT = STEP_LOSSES + textwrap.dedent("""
    import sys
    from keras_transformer.training import make_strategy
    multi_worker = make_strategy("multi_worker")  # before any other TensorFlow op
    import keras, numpy as np, tensorflow as tf
    from keras_transformer import TransformerConfig, build_model
    from keras_transformer.training import TrainingModel, group_micro_batches, train

    # Scaling: N updates on 2 workers (1 replica each) against 1 worker with 1 replica on the
    # same global batches. tf.distribute splits each global batch in halves, one per worker;
    # the halves hold different numbers of real tokens (padding), so an update that averaged
    # per-worker means, or summed without dividing by the global token count, would differ.
    # Dropout 0: a replica's dropout masks for half a batch are not the rows of the masks
    # one device draws for the whole batch, so no reference would exist with dropout.
    config = TransformerConfig(vocab_size=40, num_layers=1, d_model=32, d_ff=64, num_heads=4,
                               dropout=0.0)
    rng = np.random.default_rng(0)
    batches = []
    for batch, length in [(4, 5), (2, 7), (6, 3), (4, 6), (2, 4), (4, 8)]:
        labels = rng.integers(4, 40, size=(batch, length)).astype("int32")
        labels[batch // 2:, 2:] = 0  # the second half (worker 1's) is mostly padding
        target = np.concatenate([np.full((batch, 1), 2, "int32"), labels[:, :-1]], 1)
        batches.append(({"source_ids": labels[:, ::-1].copy(), "target_ids": target}, labels))
    spec = ({"source_ids": tf.TensorSpec([None, None], tf.int32),
             "target_ids": tf.TensorSpec([None, None], tf.int32)},
            tf.TensorSpec([None, None], tf.int32))
    data = group_micro_batches(
        tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec), 2)

    keras.utils.set_random_seed(7)
    initial = build_model(config).get_weights()

    def run(strategy):
        with strategy.scope():
            transformer = build_model(config)
            transformer.set_weights(initial)
            model = TrainingModel(transformer)
            # Plain SGD, as in the mirrored test: Adam's first steps hide real differences.
            optimizer = keras.optimizers.SGD(learning_rate=0.5)
            model.compile(optimizer=optimizer)
            optimizer.build(transformer.trainable_variables)
        model.fit(data, steps_per_epoch=3, epochs=1, verbose=0, shuffle=False)
        return transformer.get_weights()

    weights = {"initial": initial, "multi_worker": run(multi_worker),
               "one_worker": run(make_strategy("one_device"))}
    np.savez(sys.argv[3], **{f"{name}-{i:03d}": value for name, values in weights.items()
                             for i, value in enumerate(values)})

    # The whole entry point under "multi_worker".
    losses = StepLosses()
    result = train(sys.argv[1], callbacks=[losses])
    np.savez(sys.argv[2], *result.model.get_weights())
    np.savez(sys.argv[2][:-4] + "-steps.npz", *losses.initial, losses=losses.losses)
    print("step", result.step, "replicas", result.num_replicas)
""")


@pytest.fixture(scope="module")
def multi_worker_run(cluster_configs, mirrored_run):
    tmp_path, config = cluster_configs["folder"], cluster_configs["config"]
    # mirrored_run wrote the one-worker reference (one_worker*.npz) into the cluster's folder.
    script = tmp_path / "worker.py"
    script.write_text(WORKER_SCRIPT)
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    processes = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        processes.append(
            _preloaded_python.Popen(
                [
                    PYTHON,
                    str(script),
                    config,
                    str(tmp_path / f"weights{index}.npz"),
                    str(tmp_path / f"scaling{index}.npz"),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=REPO,
                env=subprocess_env(TF_CONFIG=json.dumps(tf_config)),
            )
        )
    outputs = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=420))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    for process, (stdout, stderr) in zip(processes, outputs):
        assert process.returncode == 0, stderr[-6000:]
        assert "step 3 replicas 2" in stdout
    return tmp_path


def test_multi_worker_matches_one_worker_with_the_same_global_batches(multi_worker_run):
    for index in range(2):
        scaling = np.load(multi_worker_run / f"scaling{index}.npz")
        initial, multi_worker, one_worker = (
            [scaling[key] for key in sorted(scaling.files) if key.startswith(name + "-")]
            for name in ("initial", "multi_worker", "one_worker")
        )
        assert len(multi_worker) == len(one_worker) == len(initial) > 0
        moved = max(float(np.max(np.abs(a - b))) for a, b in zip(initial, one_worker))
        assert moved > 1e-3  # 3 updates did change the weights
        for a, b in zip(multi_worker, one_worker):
            # float32 sums in another order (all-reduce of halves): rounding only.
            np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4)


def test_multi_worker_train_entry_point(multi_worker_run):
    tmp_path = multi_worker_run
    first, second = (np.load(tmp_path / f"weights{i}.npz") for i in range(2))
    assert len(first.files) == len(second.files) > 0
    for name in first.files:
        np.testing.assert_allclose(first[name], second[name], atol=1e-6)
    # ... and end where train() on one worker with the same replicas ends.
    one_worker = np.load(tmp_path / "one_worker.npz")
    assert one_worker.files == first.files
    for name in first.files:
        # float32 sums in another order (the all-reduce across processes): rounding only.
        np.testing.assert_allclose(first[name], one_worker[name], atol=1e-5, rtol=1e-4)
    # From the same start, and far from it: 3 updates moved the weights well beyond that
    # tolerance.
    steps = [np.load(tmp_path / f"{name}-steps.npz") for name in ("weights0", "one_worker")]
    initial = [[step[f"arr_{i}"] for i in range(len(first.files))] for step in steps]
    for a, b in zip(*initial):
        np.testing.assert_array_equal(a, b)
    moved = max(
        float(np.max(np.abs(first[f"arr_{i}"] - start))) for i, start in enumerate(initial[0])
    )
    assert moved > 1e-2
    # Every update's loss (over both workers' halves) is the one worker's.
    losses = [step["losses"] for step in steps]
    assert len(losses[0]) == 3
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
    # Only the chief (worker 0) writes the run folder.
    assert (tmp_path / "run" / "checkpoints" / "ckpt-3.index").exists()
    assert (tmp_path / "run" / "model.keras").exists()
