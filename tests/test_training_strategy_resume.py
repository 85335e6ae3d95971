"""Exact resume under MirroredStrategy (2 logical CPU devices): a run with dropout, killed with
SIGKILL 3 times (during start-up, inside a checkpoint write and after a few new checkpoints,
in an order and at times drawn anew in each test session: tests/_kill_fixtures.py) and
restarted with the same command each time, ends with the weights of the same run never
interrupted.

tf.distribute's own iterators cannot be checkpointed; the run reads its batches through a
`CheckpointableFeed` (a host iterator, and the batches the distributed input had prefetched),
which the checkpoints hold. Every piece of state (weights, step, Adam moments, the dropout
seed generators, the data position) must come back for the weights to agree.
"""

import random

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.runs.checkpoints import list_checkpoints
from tests._kill_fixtures import (  # noqa: F401 (show_kill_seed: an autouse fixture)
    KILL_SEED,
    Launcher,
    checkpoint_steps,
    kill_runs,
    show_kill_seed,
)
from tests._training_fixtures import tiny_config, write_config, write_reverse_corpus

# The kill fixture with its runs takes 1.5 min on a loaded 2-core machine; a hung run fails
# sooner than the suite-wide timeout (the launcher's own deadline fails it first).
pytestmark = pytest.mark.timeout(420)

TRAIN_STEPS = 12


def _config(output_dir, corpus):
    return tiny_config(
        output_dir,
        corpus,
        strategy="mirrored",
        num_devices=2,
        data={"dev": None},
        model={"dropout": 0.1},
        schedule={"train_steps": TRAIN_STEPS, "eval_every_steps": TRAIN_STEPS // 2},
        checkpoints={"every_steps": 1, "keep_last": 3, "average_last": 0},
    )


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    directory = tmp_path_factory.mktemp("mirrored-resume")
    corpus = write_reverse_corpus(directory / "corpus", train_lines=200)
    killed = write_config(directory / "killed.json", _config(directory / "killed", corpus))
    uninterrupted = write_config(
        directory / "reference.json", _config(directory / "reference", corpus)
    )
    checkpoint_dir = str(directory / "killed" / "checkpoints")
    # Two launchers: the reference trains beside the killed run (one core each).
    launcher = Launcher(directory / "killed-launcher", killed, directory / "pause-in-save")
    reference = Launcher(directory / "reference-launcher", uninterrupted, directory / "no-pause")
    rng = random.Random(KILL_SEED)
    modes = ["startup", "write", "steps"]
    rng.shuffle(modes)
    try:
        reference_run = reference.start()
        kills = kill_runs(
            launcher, modes, rng, checkpoint_dir, new_checkpoints=(2, 4), startup=(0.5, 3.0)
        )
        run = launcher.start()
        status = run.wait()
        assert status == 0, launcher.log(run.number, "err")[-6000:]
        finished_stderr = launcher.log(run.number, "err")
        assert reference_run.wait() == 0, reference.log(reference_run.number, "err")[-6000:]
    finally:
        launcher.close()
        reference.close()
    return {
        "kills": kills,
        "finished_stderr": finished_stderr,
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


def test_three_kills_then_the_weights_of_an_uninterrupted_run(killed_run):
    kills = killed_run["kills"]
    assert sorted(kill["mode"] for kill in kills) == ["startup", "steps", "write"]
    # The kills after steps came after new checkpoints: those restarts resumed further.
    for kill in kills:
        if kill["mode"] != "startup":
            assert kill["listed"][-1] > kill["resumed_from"]
    assert checkpoint_steps(killed_run["killed"] / "checkpoints")[-1] == TRAIN_STEPS
    resumed, reference = _weights(killed_run["killed"]), _weights(killed_run["reference"])
    assert len(resumed) > 10 and resumed.keys() == reference.keys()
    for name in resumed:
        # Float tolerance: the two replicas' sums may round differently between processes.
        np.testing.assert_allclose(
            resumed[name], reference[name], rtol=1e-5, atol=1e-6, err_msg=name
        )
    # The model was still moving at the end, so equal weights are no accident.
    checkpoints = list_checkpoints(killed_run["killed"] / "checkpoints")
    before_last = tf.train.load_checkpoint(checkpoints[-2])
    assert any(
        not np.allclose(before_last.get_tensor(name), resumed[name], atol=1e-4) for name in resumed
    )


def test_kill_inside_a_checkpoint_write_resumes_from_the_previous_one(killed_run):
    [kill] = [kill for kill in killed_run["kills"] if kill["mode"] == "write"]
    paused_step = int(kill["paused_in"].rsplit("-", 1)[1])
    # Its files were written, but the state file did not list it: the restart ignored it.
    assert kill["unlisted_files"]
    assert kill["listed"][-1] == paused_step - 1


def test_the_restart_restores_the_data_position_from_the_checkpoint(killed_run):
    # The host iterator of the feed and the batches it had handed on but not trained on are in
    # the checkpoints: no replay of the data stream.
    resumed_from = killed_run["kills"][-1]["listed"][-1]
    stderr = killed_run["finished_stderr"]
    assert f"from step {resumed_from}" in stderr
    assert "restored the data position from" in stderr and "skipping the" not in stderr
    latest = list_checkpoints(killed_run["killed"] / "checkpoints")[-1]
    names = [name for name, _ in tf.train.list_variables(latest)]
    assert any(name.startswith("data_iterator/iterator/") for name in names)
    assert any(name.startswith("data_iterator/pending/") for name in names)
    # The distributed input had prefetched batches not yet trained on when it was written
    # (3 leaves each: source ids, target ids, labels): the restart had to give them first.
    pending = tf.train.load_checkpoint(latest).get_tensor(
        "data_iterator/pending/.ATTRIBUTES/VARIABLE_VALUE"
    )
    assert len(pending) > 0 and len(pending) % 3 == 0
    assert sum(name.startswith("seed_generators/") for name in names) == 7
