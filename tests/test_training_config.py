"""TrainingConfig: every bad key, type, file or folder is one clear error before training."""

import json
import os

import pytest

from keras_transformer.errors import UserInputError
from keras_transformer.training.config import TrainingConfig
from keras_transformer.training.config_reading import apply_overrides
from tests._training_fixtures import tiny_config, write_reverse_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_reverse_corpus(tmp_path_factory.mktemp("corpus"), train_lines=20, dev_lines=5)


def test_defaults_follow_the_paper(corpus, tmp_path):
    config = TrainingConfig.from_dict(
        {
            "output_dir": str(tmp_path),
            "data": {"train": {"source": corpus["train_source"], "target": corpus["train_target"]}},
        }
    )
    assert config.schedule.warmup_steps == 4000
    assert config.schedule.tokens_per_update == 25000
    assert config.checkpoints.every_minutes == 10
    assert config.checkpoints.average_last == 5
    model = config.transformer_config(vocab_size=37000)
    assert (model.d_model, model.num_layers, model.label_smoothing) == (512, 6, 0.1)
    # One corpus may be written without a list.
    assert len(config.data.train) == 1


def test_yaml_and_json_files_give_the_same_config(corpus, tmp_path):
    values = tiny_config(tmp_path / "run", corpus)
    json_path = tmp_path / "config.json"
    json_path.write_text(json.dumps(values))
    yaml = pytest.importorskip("yaml")
    yaml_path = tmp_path / "config.yaml"
    yaml_path.write_text(yaml.safe_dump(values))
    assert TrainingConfig.from_file(json_path) == TrainingConfig.from_file(yaml_path)
    # The config round-trips through its JSON.
    config = TrainingConfig.from_file(json_path)
    assert TrainingConfig.from_dict(json.loads(config.to_json())) == config


@pytest.mark.parametrize(
    "change, key",
    [
        ({"learning_rate": 1.0}, "learning_rate"),
        ({"schedule": {"warmup": 10}}, "schedule.warmup"),
        ({"data": {"token_budjet": 10}}, "data.token_budjet"),
        ({"checkpoints": {"every_minute": 1}}, "checkpoints.every_minute"),
    ],
)
def test_unknown_keys_are_named(corpus, tmp_path, change, key):
    with pytest.raises(UserInputError, match=rf"unknown key\(s\) {key}\b"):
        TrainingConfig.from_dict(tiny_config(tmp_path, corpus, **change))


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"schedule": {"train_steps": "many"}},
            r"schedule.train_steps must be an integer, got 'many'",
        ),
        ({"schedule": {"train_steps": 2.5}}, r"schedule.train_steps must be an integer"),
        ({"xla": "yes"}, r"xla must be true or false"),
        ({"precision": "float16"}, r"precision must be 'float32' or 'mixed_bfloat16' or"),
        ({"strategy": "tpu"}, r"strategy must be 'auto' or 'one_device'"),
        ({"data": {"token_budget": -1}}, r"data.token_budget: must be positive"),
        ({"data": {"train": "file.txt"}}, r"data.train must be a list of a mapping"),
        ({"checkpoints": {"average_last": 9}}, r"raise keep_last to at least 9"),
        ({"checkpoints": {"average_last_fraction": 0}}, r"above 0 and at most 1, got 0"),
        ({"checkpoints": {"average_last_fraction": 1.5}}, r"above 0 and at most 1, got 1.5"),
        ({"checkpoints": {"average_last_fraction": float("nan")}}, r"at most 1, got nan"),
        ({"model": {"preset": "huge"}}, r"model.preset: unknown preset 'huge'"),
        ({"model": {"preset": "base", "num_layer": 2}}, r"unknown TransformerConfig field"),
        ({"model": {"preset": "base", "vocab_size": 100}}, r"model.vocab_size: is taken from"),
        (
            {"dev_bleu": {"sentences": 5}, "data": {"dev": None}},
            r"dev_bleu.sentences: needs data.dev",
        ),
        ({"dev_bleu": {"patience": 0}}, r"dev_bleu.patience: must be positive or null"),
        ({"schedule": {"max_train_minutes": 0}}, r"schedule.max_train_minutes: must be positive"),
        (
            {"schedule": {"max_train_minutes": float("nan")}},
            r"schedule.max_train_minutes: must be positive or null, got nan",
        ),
        ({"schedule": {"decay": "cosine"}}, r"schedule.decay must be 'rsqrt' or 'linear'"),
        (
            {"schedule": {"decay": "linear", "warmup_steps": 500, "train_steps": 500}},
            r"schedule.warmup_steps: \(500\) must be below schedule.train_steps \(500\).*raise "
            r"train_steps, lower warmup_steps, or use decay 'rsqrt'",
        ),
        (
            {"schedule": {"max_train_minutes": 60}, "strategy": "multi_worker"},
            r"schedule.max_train_minutes: .*multi_worker.*train_steps",
        ),
    ],
)
def test_wrong_types_and_values_are_named(corpus, tmp_path, change, message):
    with pytest.raises(UserInputError, match=message):
        TrainingConfig.from_dict(tiny_config(tmp_path, corpus, **change))


def test_missing_required_key(tmp_path):
    with pytest.raises(UserInputError, match="data is required"):
        TrainingConfig.from_dict({"output_dir": str(tmp_path)})


def test_missing_files_are_named(corpus, tmp_path):
    config = TrainingConfig.from_dict(
        tiny_config(
            tmp_path, corpus, data={"dev": {"source": "nowhere.en", "target": corpus["dev_target"]}}
        )
    )
    with pytest.raises(UserInputError, match=r"data.dev.source: file 'nowhere.en' does not exist"):
        config.check_paths()
    config = TrainingConfig.from_dict(tiny_config(tmp_path, corpus, data={"vocab": "v.model"}))
    with pytest.raises(UserInputError, match=r"data.vocab: file 'v.model' does not exist"):
        config.check_paths()


def test_missing_files_lists_every_missing_file(corpus, tmp_path):
    values = tiny_config(tmp_path, corpus, data={"vocab": str(tmp_path)})
    values["data"]["train"].append({"source": corpus["train_source"], "target": "no.tgt"})
    values["data"]["train"].append(
        {"tfds": "wmt14_translate/de-en", "source": "en", "target": "de"}
    )
    assert TrainingConfig.from_dict(values).missing_files() == [
        "data.train[1].target: file 'no.tgt' does not exist; check the path",
        f"data.vocab: file {str(tmp_path)!r} is a directory; check the path",
    ]


def test_environment_variables_in_a_file_are_put_in(corpus, tmp_path, monkeypatch):
    yaml = pytest.importorskip("yaml")
    folder = os.path.dirname(corpus["train_source"])
    values = tiny_config(tmp_path / "run", corpus)
    values["data"]["train"][0]["source"] = "${CORPUS_DIR}/train.src"
    values["data"]["dev"]["target"] = "${CORPUS_DIR}/${DEV_NAME}"
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(values))
    monkeypatch.setenv("CORPUS_DIR", folder)
    monkeypatch.setenv("DEV_NAME", "dev.tgt")
    config = TrainingConfig.from_file(path)
    assert config.data.train[0].source == corpus["train_source"]
    assert config.data.dev.target == corpus["dev_target"]
    # In a --set value too; a changed value is not read from the file at all.
    config = TrainingConfig.from_file(path, overrides=["output_dir=${CORPUS_DIR}/run2"])
    assert config.output_dir == f"{folder}/run2"
    monkeypatch.delenv("DEV_NAME")
    with pytest.raises(UserInputError) as raised:
        TrainingConfig.from_file(path)
    assert str(raised.value).startswith(
        f"{path}: data.dev.target: the environment variable DEV_NAME in "
        "'${CORPUS_DIR}/${DEV_NAME}' is not set"
    )
    monkeypatch.setenv("DEV_NAME", "")  # empty is unset: it would make a path of the folder
    with pytest.raises(UserInputError, match="DEV_NAME"):
        TrainingConfig.from_file(path)
    changed = TrainingConfig.from_file(
        path, changes={"data.dev": {"source": "a.en", "target": "a.de"}}
    )
    assert changed.data.dev.target == "a.de"


def test_changes_apply_before_overrides(corpus, tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(tiny_config(tmp_path / "run", corpus)))
    config = TrainingConfig.from_file(
        path,
        overrides=["schedule.train_steps=7"],
        changes={"schedule.train_steps": 5, "schedule.warmup_steps": 3},
    )
    assert (config.schedule.train_steps, config.schedule.warmup_steps) == (7, 3)


def test_to_yaml_reads_back_as_the_same_config(corpus, tmp_path):
    yaml = pytest.importorskip("yaml")
    config = TrainingConfig.from_dict(tiny_config(tmp_path, corpus))
    text = config.to_yaml()
    assert text.startswith("output_dir: ")  # in the order of the dataclass
    assert TrainingConfig.from_dict(yaml.safe_load(text)) == config


def test_train_rejects_bad_input_before_training(corpus, tmp_path):
    from keras_transformer.training import train

    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(UserInputError, match="is not writable"):
        train(tiny_config(blocker / "run", corpus))
    with pytest.raises(UserInputError, match="unknown key"):
        train(tiny_config(tmp_path / "run", corpus, epochs=3))
    missing = tiny_config(tmp_path / "run2", corpus)
    missing["data"]["train"][0]["source"] = str(tmp_path / "missing.src")
    with pytest.raises(UserInputError, match=r"data.train\[0\].source"):
        train(missing)
    assert not os.path.exists(tmp_path / "run") and not os.path.exists(tmp_path / "run2")


def test_the_file_name_is_in_file_errors(corpus, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(tiny_config(tmp_path, corpus, xla=1)))
    with pytest.raises(UserInputError, match=r"bad.json: xla must be true or false"):
        TrainingConfig.from_file(path)
    path.write_text("{not json")
    with pytest.raises(UserInputError, match="not valid JSON"):
        TrainingConfig.from_file(path)


def test_overrides(corpus, tmp_path):
    values = tiny_config(tmp_path, corpus)
    changed = apply_overrides(
        values, ["schedule.train_steps=99", "checkpoints.every_steps=null", "xla=true"]
    )
    config = TrainingConfig.from_dict(changed)
    assert config.schedule.train_steps == 99
    assert config.checkpoints.every_steps is None and config.xla is True
    assert values["schedule"]["train_steps"] == 12  # the input is not modified
    with pytest.raises(UserInputError, match="KEY=VALUE"):
        apply_overrides(values, ["train_steps"])
    with pytest.raises(
        UserInputError,
        match=r"'train' is a list; set it whole, e\.g\. "
        r"data\.train=\[\{source: a\.en",
    ):
        apply_overrides(values, ["data.train.0.target=x.de"])


def test_a_bad_value_from_set_is_named_as_given_not_as_the_files(corpus, tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(tiny_config(tmp_path / "run", corpus)))
    with pytest.raises(UserInputError) as raised:
        TrainingConfig.from_file(path, overrides=["schedule.train_steps=abc"])
    assert str(raised.value).startswith("--set schedule.train_steps=abc: schedule.train_steps")
    values = tiny_config(tmp_path / "run", corpus)
    values["schedule"]["warmup_steps"] = "many"
    path.write_text(json.dumps(values))
    with pytest.raises(UserInputError) as raised:  # the file's own value: the file is named
        TrainingConfig.from_file(path, overrides=["schedule.train_steps=5"])
    assert str(raised.value).startswith(f"{path}: schedule.warmup_steps")
    values["schedule"]["warmup_steps"] = 10
    path.write_text(json.dumps(values))
    with pytest.raises(UserInputError) as raised:  # a misspelt model field from the command line
        TrainingConfig.from_file(path, overrides=["model.dmodel=64"])
    assert str(raised.value).startswith("--set model.dmodel=64: model:")
    assert "dmodel" in str(raised.value)


def test_accumulation_steps_from_tokens_per_update(corpus, tmp_path):
    config = TrainingConfig.from_dict(
        tiny_config(
            tmp_path, corpus, data={"token_budget": 3125}, schedule={"tokens_per_update": 25000}
        )
    )
    assert config.accumulation_steps(num_replicas=8) == 1  # the paper: 8 GPUs, no accumulation
    assert config.accumulation_steps(num_replicas=1) == 8
    assert config.accumulation_steps(num_replicas=3) == 3
    fixed = config.replace(schedule=config.schedule.__class__(accumulation_steps=5))
    assert fixed.accumulation_steps(num_replicas=1) == 5


def test_a_corpus_line_that_is_not_utf8_stops_the_run_or_is_skipped_on_request(corpus, tmp_path):
    from keras_transformer.training import train

    bad = tmp_path / "bad.tgt"
    lines = open(corpus["train_target"], "rb").read().split(b"\n")
    lines[4] = b"caf\xe9 " + lines[4]
    bad.write_bytes(b"\n".join(lines))
    config = tiny_config(tmp_path / "run", corpus, schedule={"train_steps": 2})
    config["data"]["train"][0]["target"] = str(bad)
    # The hint names what a training config can do about it (not a flag `train` lacks).
    with pytest.raises(
        UserInputError,
        match=r"line 5 is not valid UTF-8 .*`on_bad_line: skip` "
        r"on the corpus in a training config",
    ):
        train(config)
    config["output_dir"] = str(tmp_path / "skipping")
    config["data"]["train"][0]["on_bad_line"] = "skip"
    summary = train(config)
    assert summary.step == 2
    config["data"]["train"][0]["on_bad_line"] = "ignore"
    with pytest.raises(UserInputError, match=r"data.train\[0\].on_bad_line"):
        TrainingConfig.from_dict(config)
