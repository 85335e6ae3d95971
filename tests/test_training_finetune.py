"""Fine-tuning (`init_from`, `train --init-from`): a new run starts from a trained run's
weights and vocabulary, with a fresh optimizer at step 0; another model shape, another
vocabulary or a run folder without weights is refused; a resumed fine-tuning run resumes from
its own checkpoints."""

import filecmp
import json
import os
import shutil

import keras
import numpy as np
import pytest

from keras_transformer.errors import UserInputError
from keras_transformer.runs.checkpoints import list_checkpoints
from keras_transformer.runs.models import load_model
from keras_transformer.training import train
from tests._training_fixtures import tiny_config, write_reverse_corpus


class _AtStart(keras.callbacks.Callback):
    """Records the weights and optimizer state a run begins its first update with."""

    def on_train_begin(self, logs=None):
        optimizer = self.model.optimizer
        self.step = int(optimizer.iterations.numpy())
        self.weights = {v.path: np.array(v.numpy()) for v in self.model.transformer.weights}
        moments = [v for v in optimizer.variables if "momentum" in v.path or "velocity" in v.path]
        self.moment_count = len(moments)
        self.largest_moment = max(float(np.max(np.abs(v.numpy()))) for v in moments)


def _weights_of(path):
    model, _ = load_model(path)
    return {v.path: np.array(v.numpy()) for v in model.weights}


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    """Run A: a tiny model trained 6 steps on one corpus."""
    root = tmp_path_factory.mktemp("base")
    corpus = write_reverse_corpus(root / "corpus", train_lines=80, dev_lines=4, seed=0)
    config = tiny_config(
        root / "a",
        corpus,
        data={"dev": None},
        schedule={"train_steps": 6, "eval_every_steps": 6},
        checkpoints={"every_steps": 3, "average_last": 2},
    )
    train(config)
    keras.backend.clear_session()
    return root / "a"


@pytest.fixture()
def other_corpus(tmp_path):
    return write_reverse_corpus(tmp_path / "corpus", train_lines=80, dev_lines=4, seed=7)


def _finetune_config(output_dir, corpus, base_run, **sections):
    sections.setdefault("data", {"dev": None})
    sections.setdefault("schedule", {"train_steps": 3, "eval_every_steps": 3})
    return tiny_config(output_dir, corpus, init_from=str(base_run), **sections)


def test_finetuning_starts_from_the_weights_of_the_run_with_a_fresh_optimizer(
    base_run, other_corpus, tmp_path
):
    at_start = _AtStart()
    config = _finetune_config(tmp_path / "b", other_corpus, base_run)
    result = train(config, callbacks=[at_start])
    keras.backend.clear_session()
    # Step 0, no moments yet: nothing of A's optimizer came along.
    assert at_start.step == 0 and result.resumed_from_step == 0 and result.step == 3
    assert at_start.moment_count > 0 and at_start.largest_moment == 0.0
    # The first update starts from A's averaged weights, every one of them.
    expected = _weights_of(str(base_run / "averaged.keras"))
    assert sorted(at_start.weights) == sorted(expected)
    for path, value in expected.items():
        np.testing.assert_array_equal(at_start.weights[path], value, err_msg=path)
    # A's vocabulary (not one trained on B's corpus), and where B started is on record.
    assert filecmp.cmp(base_run / "vocab.model", tmp_path / "b" / "vocab.model", shallow=False)
    record = json.loads((tmp_path / "b" / "init.json").read_text())
    assert record == {
        "run": os.path.abspath(base_run),
        "file": str(base_run / "averaged.keras"),
        "kind": "averaged",
        "step": 6,
    }
    saved = json.loads((tmp_path / "b" / "training_config.json").read_text())
    assert saved["init_from"] == str(base_run)
    assert saved["data"]["vocab"] == str(base_run / "vocab.model")
    assert "started from the weights of" in result.summary()


def test_finetuning_from_a_run_without_saved_models_takes_its_newest_checkpoint(
    base_run, other_corpus, tmp_path
):
    only_checkpoints = tmp_path / "a_checkpoints"
    shutil.copytree(base_run, only_checkpoints)
    (only_checkpoints / "averaged.keras").unlink()
    (only_checkpoints / "model.keras").unlink()
    newest = list_checkpoints(only_checkpoints / "checkpoints")[-1]
    at_start = _AtStart()
    train(_finetune_config(tmp_path / "b", other_corpus, only_checkpoints), callbacks=[at_start])
    keras.backend.clear_session()
    record = json.loads((tmp_path / "b" / "init.json").read_text())
    assert (record["kind"], record["file"], record["step"]) == ("checkpoint", newest, 6)
    # The checkpoint of step 6 holds the weights A's model.keras was saved with.
    for path, value in _weights_of(str(base_run / "model.keras")).items():
        np.testing.assert_array_equal(at_start.weights[path], value, err_msg=path)


def test_a_resumed_finetuning_run_resumes_from_its_own_checkpoints(
    base_run, other_corpus, tmp_path
):
    source = tmp_path / "a_copy"  # removed before the resume: it must not be needed
    shutil.copytree(base_run, source)
    config = _finetune_config(tmp_path / "b", other_corpus, source)
    first = train(config)
    keras.backend.clear_session()
    assert first.step == 3
    own = _weights_of(str(tmp_path / "b" / "model.keras"))
    shutil.rmtree(source)
    config["schedule"]["train_steps"] = 5
    at_start = _AtStart()
    resumed = train(config, callbacks=[at_start])
    keras.backend.clear_session()
    assert (resumed.resumed_from_step, resumed.step, at_start.step) == (3, 5, 3)
    assert resumed.initialized_from is None
    for path, value in own.items():
        np.testing.assert_array_equal(at_start.weights[path], value, err_msg=path)


def test_another_model_shape_is_refused_naming_each_field(base_run, other_corpus, tmp_path):
    config = _finetune_config(
        tmp_path / "b",
        other_corpus,
        base_run,
        model={"preset": "base", "num_layers": 2, "d_model": 32, "d_ff": 128, "num_heads": 4},
    )
    with pytest.raises(UserInputError) as error:
        train(config)
    message = str(error.value)
    assert "num_layers: 1 in init_from, 2 in this config" in message
    assert "d_ff: 64 in init_from, 128 in this config" in message
    assert "dropout" not in message  # 0.0 in A, 0.1 here: dropout may change
    assert not (tmp_path / "b").exists()  # a refused start leaves nothing behind


def test_a_vocabulary_of_other_pieces_is_refused(base_run, other_corpus, tmp_path):
    from keras_transformer import data

    prefix = str(tmp_path / "other")
    data.train_vocabulary(
        [data.TextPairCorpus(other_corpus["train_source"], other_corpus["train_target"])],
        prefix,
        vocab_size=320,
    )
    config = _finetune_config(
        tmp_path / "b", other_corpus, base_run, data={"dev": None, "vocab": prefix + ".model"}
    )
    with pytest.raises(UserInputError, match="has other pieces than"):
        train(config)
    # A copy of the run's vocabulary is taken.
    same = tmp_path / "same.model"
    shutil.copyfile(base_run / "vocab.model", same)
    config["data"]["vocab"] = str(same)
    config["schedule"]["train_steps"] = 1
    train(config)
    keras.backend.clear_session()
    assert filecmp.cmp(base_run / "vocab.model", tmp_path / "b" / "vocab.model", shallow=False)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda path: None, "is not a folder"),
        (lambda path: path.mkdir(), "has no config.json"),
    ],
)
def test_a_missing_or_empty_run_folder_is_one_clear_error(other_corpus, tmp_path, make, message):
    make(tmp_path / "nothing")
    config = tiny_config(
        tmp_path / "b", other_corpus, data={"dev": None}, init_from=str(tmp_path / "nothing")
    )
    with pytest.raises(UserInputError, match=message):
        train(config)
    assert not (tmp_path / "b").exists()


def test_a_run_folder_without_weights_is_refused(base_run, other_corpus, tmp_path):
    empty = tmp_path / "a_empty"
    empty.mkdir()
    for name in ("config.json", "vocab.model"):
        shutil.copyfile(base_run / name, empty / name)
    config = tiny_config(tmp_path / "b", other_corpus, data={"dev": None}, init_from=str(empty))
    with pytest.raises(UserInputError, match="holds no weights"):
        train(config)


def test_the_cli_flag_sets_init_from(base_run, other_corpus, tmp_path, capsys):
    from keras_transformer.cli import main

    path = tmp_path / "b.json"
    config = tiny_config(tmp_path / "b", other_corpus, data={"dev": None})
    path.write_text(json.dumps(config))
    assert main(["train", "--config", str(path), "--init-from", str(tmp_path / "nothing")]) == 2
    assert "error: --init-from '" in capsys.readouterr().err
    both = ["--init-from", "x", "--set", f"init_from={base_run}"]
    assert main(["train", "--config", str(path), *both]) == 2
    assert "both name the run to start from" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize(
    "init_from, message",
    [(" ", "init_from: is empty"), ("runs/b/", "init_from: names the run folder itself")],
)
def test_init_from_is_checked_with_the_config(init_from, message):
    from keras_transformer.training import TrainingConfig

    corpus = {"train_source": "a", "train_target": "b", "dev_source": "c", "dev_target": "d"}
    with pytest.raises(UserInputError, match=message):
        TrainingConfig.from_dict(tiny_config("runs/b", corpus, init_from=init_from))
