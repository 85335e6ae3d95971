"""train(): a run folder that decoding can load, TensorBoard logs, and settings (precision,
XLA) that take effect; a folder of another model is never overwritten, and a run goes on
under new dropout."""

import glob
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TransformerConfig
from keras_transformer._keras_internals import flatten_layers
from keras_transformer.errors import UserInputError
from keras_transformer.runs.layout import OutputDir
from keras_transformer.training import train
from tests._training_fixtures import max_abs_difference, tiny_config, write_reverse_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_reverse_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def finished(corpus, tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("runs") / "reverse"
    config = tiny_config(
        output_dir,
        corpus,
        schedule={
            "train_steps": 30,
            "eval_every_steps": 15,
            "warmup_steps": 20,
            "learning_rate_scale": 2.0,
        },
        dev_bleu={"sentences": 10, "beam_size": 2},
    )
    return config, train(config)


def _scalars(folder):
    """{tag: [(step, value), ...]} of the TensorBoard event files in `folder`."""
    values = {}
    for path in glob.glob(os.path.join(folder, "events.out.tfevents.*")):
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                number = (
                    float(tf.make_ndarray(value.tensor))
                    if value.HasField("tensor")
                    else value.simple_value
                )
                values.setdefault(value.tag, []).append((event.step, number))
    return values


def test_run_folder_layout_loads_for_decoding(finished):
    _, result = finished
    run = result.output_dir
    assert result.step == 30 and result.resumed_from_step == 0
    with open(run.model_config) as file:
        model_config = TransformerConfig.from_json(file.read())
    from keras_transformer.data import SubwordVocabulary

    assert model_config.vocab_size == SubwordVocabulary.from_file(run.vocabulary).size
    final = keras.saving.load_model(run.final_model)
    assert final.config == model_config
    assert max_abs_difference(final.get_weights(), result.model.get_weights()) == 0
    averaged = keras.saving.load_model(run.averaged_model)
    assert run.translation_model == run.averaged_model
    assert max_abs_difference(averaged.get_weights(), final.get_weights()) > 0
    assert sorted(os.listdir(run.checkpoint_dir))[0] == "checkpoint"
    with open(run.training_config) as file:
        assert json.load(file)["schedule"]["train_steps"] == 30


def test_training_learns_and_logs(finished):
    _, result = finished
    run = result.output_dir
    history = result.history
    assert history["loss"][-1] < history["loss"][0] - 0.5
    assert history["val_perplexity"][-1] < history["val_perplexity"][0]
    with open(run.history) as file:
        entries = json.load(file)
    assert [entry["step"] for entry in entries] == [15, 30]
    assert entries[-1]["tokens_per_second"] > 0
    train_logs = _scalars(os.path.join(run.log_dir, "train"))
    assert {"loss", "learning_rate", "tokens_per_second"} <= set(train_logs)
    assert [step for step, _ in train_logs["loss"]] == list(range(3, 31, 3))
    assert all(value > 0 for _, value in train_logs["tokens_per_second"])
    dev_logs = _scalars(os.path.join(run.log_dir, "dev"))
    assert {"loss", "perplexity", "token_accuracy", "bleu", "chrf"} <= set(dev_logs)
    np.testing.assert_allclose(
        [v for _, v in dev_logs["perplexity"]], history["val_perplexity"], rtol=1e-5
    )


def _sacrebleu_of(model_path, config):
    """`(BLEU, chrF)`, computed here with sacreBLEU, of `model_path`'s translations of the dev
    sentences that dev BLEU scores (the first `dev_bleu.sentences`), with its search."""
    import sacrebleu

    from keras_transformer.translation import Translator

    count = config["dev_bleu"]["sentences"]
    with open(config["data"]["dev"]["source"]) as file:
        sources = file.read().splitlines()[:count]
    with open(config["data"]["dev"]["target"]) as file:
        references = file.read().splitlines()[:count]
    translator = Translator.load(
        str(model_path), beam_size=config["dev_bleu"]["beam_size"], alpha=0.6
    )
    hypotheses = translator.translate(sources)
    return (
        sacrebleu.corpus_bleu(hypotheses, [references]).score,
        sacrebleu.corpus_chrf(hypotheses, [references]).score,
    )


def test_dev_bleu_keeps_the_best_model(finished):
    config, result = finished
    run = result.output_dir
    bleu, chrf = result.history["val_bleu"], result.history["val_chrf"]
    assert len(bleu) == len(chrf) == 2
    # The last evaluation scored the final weights; the kept model scores what its record says.
    # (30 updates leave BLEU at or near 0: chrF, of the same translations, has room to differ.)
    expected = _sacrebleu_of(run.final_model, config)
    assert (bleu[1], chrf[1]) == pytest.approx(expected, abs=1e-6) and chrf[1] > 0
    with open(run.best_record) as file:
        best = json.load(file)
    assert best["bleu"] == max(bleu)
    assert best["step"] == (15 if bleu[0] >= bleu[1] else 30)
    expected = _sacrebleu_of(run.best_model, config)
    assert (best["bleu"], best["chrf"]) == pytest.approx(expected, abs=1e-6)


def test_another_model_never_overwrites_a_run(finished):
    config, _ = finished
    other = dict(config, model={**config["model"], "d_model": 64})
    with pytest.raises(
        UserInputError,
        match=r"holds a run of another model \(fields "
        r"\['d_model'",
    ):
        train(other)
    run = OutputDir(config["output_dir"])
    with open(run.model_config) as file:
        assert json.load(file)["d_model"] == 32


def test_a_run_goes_on_under_new_dropout_and_keeps_the_old_config(finished, tmp_path):
    # A recipe's dropout default may change between two starts of one command: the run goes
    # on (the weights are the same model's), and the config.json it had is kept beside.
    import shutil

    config, _ = finished
    copy = tmp_path / "reverse"
    shutil.copytree(config["output_dir"], copy)
    resumed = dict(
        config,
        output_dir=str(copy),
        model={**config["model"], "dropout": 0.2},
        schedule={**config["schedule"], "train_steps": 32},
        dev_bleu={"sentences": 0},  # not checked here, and each start would trace a search
    )
    result = train(resumed)
    assert (result.resumed_from_step, result.step) == (30, 32)
    with open(copy / "config.json") as file:
        now = json.load(file)
    (kept,) = glob.glob(str(copy / "config.*.json"))
    with open(kept) as file:
        before = json.load(file)
    assert (now["dropout"], before["dropout"]) == (0.2, config["model"]["dropout"])
    assert {k: v for k, v in now.items() if k != "dropout"} == {
        k: v for k, v in before.items() if k != "dropout"
    }
    # Attention dropout as well adds dropout layers beside those the checkpoint holds the
    # seed-generator state of: the run goes on with fresh dropout streams.
    again = dict(
        resumed,
        model={**resumed["model"], "attention_dropout": 0.1},
        schedule={**resumed["schedule"], "train_steps": 34},
    )
    assert train(again).step == 34
    with open(copy / "config.json") as file:
        assert json.load(file)["attention_dropout"] == 0.1


def test_kept_run_files_of_one_second_do_not_overwrite_each_other(tmp_path, monkeypatch):
    from keras_transformer.training import run_files

    monkeypatch.setattr(run_files.time, "strftime", lambda _: "20261128-042500")
    path = str(tmp_path / "config.json")
    kept = []
    for dropout in (0.0, 0.1, 0.2):
        with open(path, "w") as file:
            json.dump({"dropout": dropout}, file)
        kept.append(run_files.keep_previous(path))
    # Copies: the file itself stays until its successor replaces it.
    assert len(set(kept)) == 3 and json.loads(open(path).read())["dropout"] == 0.2
    assert [
        json.loads((tmp_path / os.path.basename(name)).read_text())["dropout"] for name in kept
    ] == [0.0, 0.1, 0.2]


def _matmul_dtypes(graph):
    """The dtypes of the matrix products (MatMul, BatchMatMul, Einsum) in a traced graph."""
    return {
        op.get_attr("T").name
        for op in graph.get_operations()
        if op.type in ("MatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum")
    }


def test_precision_and_xla_settings(corpus, tmp_path, monkeypatch):
    from tensorflow.python.ops import control_flow_util

    from keras_transformer import data
    from keras_transformer.training.training_model import TrainingModel

    pipelines = []

    class RecordingPipeline(data.TranslationPipeline):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            pipelines.append(self)

    monkeypatch.setattr(data, "TranslationPipeline", RecordingPipeline)
    # What the train step was traced as: inside an XLA context (tf.function(jit_compile=True)
    # traces under one; it is what TensorFlow itself checks), and in which dtype its matrix
    # products compute (forward and backward).
    traced = []
    train_step = TrainingModel.train_step

    def recording_train_step(self, data):
        logs = train_step(self, data)
        graph = tf.compat.v1.get_default_graph()
        traced.append(
            {
                "xla": control_flow_util.GraphOrParentsInXlaContext(graph),
                "jit_compile": self.jit_compile,
                "matmuls": _matmul_dtypes(graph),
            }
        )
        return logs

    monkeypatch.setattr(TrainingModel, "train_step", recording_train_step)
    config = tiny_config(
        tmp_path / "bf16",
        corpus,
        precision="mixed_bfloat16",
        xla=True,
        data={"dev": None, "pad_to_bucket_boundary": True},
        schedule={"train_steps": 2, "tokens_per_update": 100},
        checkpoints={"every_steps": None, "average_last": 0},
    )
    result = train(config)
    assert result.step == 2 and np.isfinite(result.history["loss"]).all()
    # XLA's companion setting reaches the training data pipeline.
    assert [pipeline.pad_to_bucket_boundary for pipeline in pipelines] == [True]
    assert result.model.encoder.dtype_policy.name == "mixed_bfloat16"
    assert result.averaged_model is None
    # xla: true compiles the train step with XLA; mixed_bfloat16 computes in bfloat16 (every
    # matrix product of the step) over float32 weights, and the logits stay float32.
    assert traced and all(t["xla"] and t["jit_compile"] for t in traced)
    assert all(t["matmuls"] == {"bfloat16"} for t in traced), traced
    transformer = result.model
    layers = [layer for layer in flatten_layers(transformer, include_self=False) if layer.weights]
    assert {layer.compute_dtype for layer in layers} == {"bfloat16"}
    assert {v.dtype for v in transformer.trainable_variables} == {"float32"}
    source = np.array([[5, 6, 3], [7, 3, 0]], "int32")
    memory, _ = transformer.encode(source)
    assert memory.dtype == "bfloat16"
    logits = transformer({"source_ids": source, "target_ids": np.array([[2, 8], [2, 9]])})
    assert logits.dtype == "float32"
    traced.clear()

    config = tiny_config(
        tmp_path / "fp16",
        corpus,
        precision="mixed_float16",
        data={"dev": None},
        schedule={"train_steps": 2},
        checkpoints={"average_last": 0},
    )
    result = train(config)
    assert result.step == 2 and np.isfinite(result.history["loss"]).all()
    assert result.model.encoder.dtype_policy.name == "mixed_float16"
    # Without xla the step is a plain tf.function, not compiled with XLA.
    assert traced and not any(t["xla"] or t["jit_compile"] for t in traced)
    assert all(t["matmuls"] == {"float16"} for t in traced), traced
    # float16 trains with dynamic loss scaling: the scale is part of the optimizer state.
    latest = tf.train.latest_checkpoint(result.output_dir.checkpoint_dir)
    names = [name for name, _ in tf.train.list_variables(latest)]
    assert any(name.startswith("optimizer/") and "dynamic_scale" in name for name in names)
    keras.config.set_dtype_policy("float32")


def test_average_last_fraction_averages_the_checkpoints_of_that_share_of_the_updates(
    corpus, tmp_path
):
    from keras_transformer.runs.averaging import average_checkpoints
    from keras_transformer.runs.checkpoints import list_checkpoints

    # Checkpoints at updates 3, 6, 9 and 12, all kept: the last half of the 12 updates holds
    # 9 and 12 (6 is not above 12 x 0.5), so those two are averaged, not the last 4.
    config = tiny_config(
        tmp_path / "run",
        corpus,
        data={"dev": None},
        checkpoints={"keep_last": 4, "average_last": 4, "average_last_fraction": 0.5},
    )
    result = train(config)
    paths = list_checkpoints(result.output_dir.checkpoint_dir)
    assert [os.path.basename(p) for p in paths] == ["ckpt-3", "ckpt-6", "ckpt-9", "ckpt-12"]
    averaged = keras.saving.load_model(result.output_dir.averaged_model)
    model_config = result.model.config
    expected = average_checkpoints(paths[2:], config=model_config).get_weights()
    assert max_abs_difference(averaged.get_weights(), expected) < 1e-6
    all_four = average_checkpoints(paths, config=model_config).get_weights()
    assert max_abs_difference(averaged.get_weights(), all_four) > 1e-4
