"""Exact resume of a two-worker run (MultiWorkerMirroredStrategy, two processes on localhost):
killed with SIGKILL twice, one worker a random time after a few new checkpoints and then the
other (which waits for its peer in the next all-reduce), restarted with the same command on
both workers each time, it ends with the weights of the same cluster never interrupted.

Across workers the data position is not in the checkpoints: each restart rebuilds the
shuffled stream from the seed and skips the micro-batches already trained on (replay). The
killed workers and the reference run in two launchers, one per worker
(tests/_kill_fixtures.py): the uninterrupted run first, then the killed ones.
"""

import contextlib
import json
import os
import random
import signal

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.runs.checkpoints import list_checkpoints
from tests._kill_fixtures import (  # noqa: F401 (show_kill_seed: an autouse fixture)
    KILL_SEED,
    Launcher,
    checkpoint_steps,
    show_kill_seed,
    wait_for,
)
from tests._strategy_fixtures import corpus_with_vocabulary, free_ports
from tests._training_fixtures import tiny_config, write_config

pytestmark = pytest.mark.timeout(480)

TRAIN_STEPS = 10


def _config(output_dir, corpus, vocab):
    return tiny_config(
        output_dir,
        corpus,
        strategy="multi_worker",
        data={"dev": None, "vocab": vocab},
        model={"dropout": 0.1},
        schedule={"train_steps": TRAIN_STEPS, "eval_every_steps": TRAIN_STEPS // 2},
        checkpoints={"every_steps": 1, "keep_last": 3, "average_last": 0},
    )


def _start(workers, config=""):
    return [worker.start(config) for worker in workers]


def _finish(workers):
    for worker in workers:
        status = worker.wait()
        assert status == 0, worker.log(worker.number, "err")[-6000:]


@pytest.fixture(scope="module")
def killed_cluster(tmp_path_factory):
    directory = tmp_path_factory.mktemp("multi-worker-resume")
    corpus, vocab = corpus_with_vocabulary(directory, dev_lines=4)
    killed = write_config(directory / "killed.json", _config(directory / "killed", corpus, vocab))
    reference = write_config(
        directory / "reference.json", _config(directory / "reference", corpus, vocab)
    )
    hosts = [f"127.0.0.1:{port}" for port in free_ports(2)]
    workers = [
        Launcher(
            directory / f"worker{index}",
            killed,
            directory / "no-pause",
            env={
                "TF_CONFIG": json.dumps(
                    {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}
                )
            },
        )
        for index in range(2)
    ]
    checkpoint_dir = str(directory / "killed" / "checkpoints")
    rng = random.Random(KILL_SEED)
    kills = []
    try:
        _start(workers, reference)
        _finish(workers)
        for _ in range(2):
            before = checkpoint_steps(checkpoint_dir)
            resume_step = before[-1] if before else 0
            _start(workers)
            target = resume_step + rng.randint(1, 3)
            alive = wait_for(
                lambda target=target: (checkpoint_steps(checkpoint_dir) or [0])[-1] >= target,
                workers[0],
            )
            assert alive, "the chief ended before its kill: " + workers[0].log(
                workers[0].number, "err"
            )
            first = rng.randrange(2)
            victim, peer = workers[first], workers[1 - first]
            assert victim.alive(), victim.log(victim.number, "err")[-3000:]
            assert victim.kill() == signal.SIGKILL
            with contextlib.suppress(ProcessLookupError):
                os.kill(peer.pid, signal.SIGKILL)
            peer.wait()  # killed, or ended by its peer's death
            kills.append(
                {
                    "first": first,
                    "resumed_from": resume_step,
                    "listed": checkpoint_steps(checkpoint_dir),
                }
            )
        _start(workers)
        _finish(workers)
        stderr = [worker.log(worker.number, "err") for worker in workers]
    finally:
        for worker in workers:
            worker.close()
    return {
        "kills": kills,
        "stderr": stderr,
        "killed": directory / "killed",
        "reference": directory / "reference",
    }


def _weights(run_dir):
    """The model variables of the newest checkpoint, by name."""
    latest = list_checkpoints(run_dir / "checkpoints")[-1]
    reader = tf.train.load_checkpoint(latest)
    return {
        name: reader.get_tensor(name)
        for name, _ in tf.train.list_variables(latest)
        if name.startswith("model/")
    }


def test_each_restart_resumed_further_by_replay(killed_cluster):
    kills = killed_cluster["kills"]
    assert all(kill["listed"][-1] > kill["resumed_from"] for kill in kills)
    resumed_from = kills[-1]["listed"][-1]
    for stderr in killed_cluster["stderr"]:  # both workers
        assert f"from step {resumed_from}" in stderr
        assert "skipping the" in stderr and "restored the data position" not in stderr


def test_two_kills_then_the_weights_of_an_uninterrupted_cluster(killed_cluster):
    assert checkpoint_steps(killed_cluster["killed"] / "checkpoints")[-1] == TRAIN_STEPS
    assert checkpoint_steps(killed_cluster["reference"] / "checkpoints")[-1] == TRAIN_STEPS
    resumed, reference = _weights(killed_cluster["killed"]), _weights(killed_cluster["reference"])
    assert len(resumed) > 10 and resumed.keys() == reference.keys()
    for name in resumed:
        # Float tolerance: the all-reduce across processes may sum in another order.
        np.testing.assert_allclose(
            resumed[name], reference[name], rtol=1e-5, atol=1e-6, err_msg=name
        )
    # The model was still moving at the end, so equal weights are no accident.
    checkpoints = list_checkpoints(killed_cluster["killed"] / "checkpoints")
    before_last = tf.train.load_checkpoint(checkpoints[-2])
    assert any(
        not np.allclose(before_last.get_tensor(name), resumed[name], atol=1e-4) for name in resumed
    )
