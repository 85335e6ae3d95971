"""Exact resume by replay: checkpoints without the data position (as an earlier version, or a
multi-worker run, writes them) resume by rebuilding the same shuffled stream from the seed and
skipping the micro-batches already trained on. A run with dropout whose checkpoints lack the
data position, killed with SIGKILL twice (after a few new checkpoints, and inside a checkpoint
write, in an order and at times drawn anew in each test session: tests/_kill_fixtures.py),
then resumed, ends with the weights of the same run never interrupted, bit for bit.
"""

import logging
import random

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.runs.checkpoints import has_data_iterator, list_checkpoints
from keras_transformer.training import train
from tests._kill_fixtures import (  # noqa: F401 (show_kill_seed: an autouse fixture)
    KILL_SEED,
    Launcher,
    kill_runs,
    show_kill_seed,
)
from tests._training_fixtures import tiny_config, write_config, write_reverse_corpus

pytestmark = pytest.mark.timeout(420)

TRAIN_STEPS = 16

# The killed runs write checkpoints without the data position: their restarts replay.
WITHOUT_DATA_POSITION = """
    from keras_transformer.runs.checkpoints import Checkpointer
    Checkpointer.attach_data_iterator = lambda self, iterator: False
"""


def _config(output_dir, corpus):
    return tiny_config(
        output_dir,
        corpus,
        data={"dev": None},
        model={"dropout": 0.1},
        schedule={"train_steps": TRAIN_STEPS, "eval_every_steps": TRAIN_STEPS // 2},
        checkpoints={"every_steps": 1, "keep_last": 3, "average_last": 0},
    )


@pytest.fixture(scope="module")
def replayed_run(tmp_path_factory):
    directory = tmp_path_factory.mktemp("replay-resume")
    corpus = write_reverse_corpus(directory / "corpus", train_lines=200)
    run_dir = directory / "killed"
    config = write_config(directory / "config.json", _config(run_dir, corpus))
    launcher = Launcher(
        directory / "launcher", config, directory / "pause-in-save", prelude=WITHOUT_DATA_POSITION
    )
    rng = random.Random(KILL_SEED)
    modes = ["steps", "write"]
    rng.shuffle(modes)
    try:
        kills = kill_runs(launcher, modes, rng, str(run_dir / "checkpoints"))
        killed_stderr = [launcher.log(number, "err") for number in range(len(modes))]
    finally:
        launcher.close()
    resumed_from = list_checkpoints(run_dir / "checkpoints")[-1]
    # Read now: the restart deletes it (keep_last).
    [counter] = [
        name
        for name, _ in tf.train.list_variables(resumed_from)
        if name.startswith("micro_batches_seen/")
    ]
    consumed = int(tf.train.load_checkpoint(resumed_from).get_tensor(counter))
    had_data_position = has_data_iterator(resumed_from)
    # The restart, here: the library as it is, from a checkpoint without the data position.
    # The trainer and its modules (inputs.py logs the replay) log under this name.
    logger = logging.getLogger("keras_transformer.training")
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        resumed = train(_config(run_dir, corpus))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    reference = train(_config(directory / "reference", corpus))
    return {
        "kills": kills,
        "killed_stderr": killed_stderr,
        "resumed_from": resumed_from,
        "consumed": consumed,
        "had_data_position": had_data_position,
        "resumed": resumed,
        "messages": [record.getMessage() for record in records],
        "reference": reference,
    }


def test_the_kills_left_checkpoints_without_the_data_position(replayed_run):
    kills = replayed_run["kills"]
    assert all(kill["listed"][-1] > kill["resumed_from"] for kill in kills)
    # The second killed run had resumed from the first's checkpoints, by replay too.
    assert "skipping the" in replayed_run["killed_stderr"][1]
    resumed_from = replayed_run["resumed_from"]
    assert not replayed_run["had_data_position"]
    assert replayed_run["resumed"].resumed_from_step == int(resumed_from.rsplit("-", 1)[1])


def test_the_restart_replays_the_micro_batches_trained_on(replayed_run):
    consumed = replayed_run["consumed"]
    assert consumed >= replayed_run["resumed"].resumed_from_step > 0
    assert (
        f"skipping the {consumed} micro-batches trained on before (data position)"
        in replayed_run["messages"]
    )
    assert not any("restored the data position" in m for m in replayed_run["messages"])


def test_replayed_run_ends_with_the_weights_of_an_uninterrupted_run(replayed_run):
    resumed, reference = replayed_run["resumed"], replayed_run["reference"]
    assert resumed.step == reference.step == TRAIN_STEPS
    assert len(resumed.model.weights) == len(reference.model.weights) > 10
    # Bitwise: the same ops on the same data in the same order, on one CPU device.
    for resumed_weight, reference_weight in zip(resumed.model.weights, reference.model.weights):
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(resumed_weight),
            keras.ops.convert_to_numpy(reference_weight),
            err_msg=resumed_weight.path,
        )
