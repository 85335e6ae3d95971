"""pipelines/wmt14_en_de.py and wmt14_en_fr.py, the paper's recipes, through their TFDS path.

No network here, so `tensorflow_datasets.testing.mock_data` stands in for the download: the
pipeline's own `tfds.load("wmt14_translate/de-en")` builds TFDS's real `wmt14_translate`
builder, and the mock serves that builder's examples, keyed by the builder's own feature names,
from real WMT news text (KT_DATA_DIR/wmt_extra). The dev set is the recipe's default,
KT_DATA_DIR/wmt/newstest2013.*, cut to its first lines so that scoring takes seconds. The
recipe runs with only its sizes overridden (`--set`), as a user shortens it.
"""

import importlib
import json
import math
import os

import pytest

from keras_transformer.runs.layout import OutputDir
from keras_transformer.training import TrainingConfig
from keras_transformer.training.config import apply_overrides
from tests._training_fixtures import REPO

tfds = pytest.importorskip("tensorflow_datasets", reason="the test extra installs it")

TRAIN_PAIRS = 400  # served as the TFDS train split
DEV_LINES = 8  # of newstest2013
SIZES = [
    "model.num_layers=1",
    "model.d_model=32",
    "model.d_ff=64",
    "model.num_heads=4",
    "model.key_dim=8",
    "model.value_dim=8",
    "data.vocab_size=1000",
    "data.token_budget=512",
    "data.max_length=128",
    "data.shuffle_buffer=500",
    "schedule.train_steps=3",
    "schedule.warmup_steps=10",
    "schedule.tokens_per_update=512",
    "schedule.eval_every_steps=3",
    "schedule.log_every_steps=1",
    "checkpoints.every_steps=1",
    "checkpoints.keep_last=2",
    "checkpoints.average_last=2",
    "verbose=0",
]
PAIRS = {  # module -> (TFDS config, target language, vocabulary type, a frequent target word)
    "wmt14_en_de": ("de-en", "de", "bpe", "die"),
    "wmt14_en_fr": ("fr-en", "fr", "unigram", "les"),
}


@pytest.fixture
def pipelines(monkeypatch):
    """Imports a pipelines/ script as a module (wmt14_en_fr imports wmt14_en_de)."""
    monkeypatch.syspath_prepend(str(REPO / "pipelines"))
    return importlib.import_module


@pytest.fixture
def dev_data_dir(data_dir, tmp_path, monkeypatch):
    """A KT_DATA_DIR whose wmt/newstest2013.* are the first lines of the shared ones."""
    directory = tmp_path / "data"
    (directory / "wmt").mkdir(parents=True)
    for language in ("en", "de", "fr"):
        with open(data_dir / "wmt" / f"newstest2013.{language}", encoding="utf-8") as file:
            lines = [next(file) for _ in range(DEV_LINES)]
        (directory / "wmt" / f"newstest2013.{language}").write_text(
            "".join(lines), encoding="utf-8"
        )
    monkeypatch.setenv("KT_DATA_DIR", str(directory))
    return directory


def serve_wmt_text(data_dir, target, reads):
    """An `as_dataset` for mock_data: real news pairs under the builder's own feature keys."""
    import tensorflow as tf

    lines = {}
    for language in ("en", target):
        path = data_dir / "wmt_extra" / f"newstest_extra.en-{target}.{language}"
        with open(path, encoding="utf-8") as file:
            lines[language] = [next(file).rstrip("\n") for _ in range(TRAIN_PAIRS)]

    def as_dataset(builder, split, decoders=None, read_config=None, **kwargs):
        reads.append((builder.name, builder.builder_config.name, str(split)))
        # A KeyError here means the pipeline's language keys are not the builder's features.
        return tf.data.Dataset.from_tensor_slices(
            {key: lines[key] for key in builder.info.features}
        )

    return as_dataset


@pytest.mark.parametrize("module_name", list(PAIRS))
def test_wmt14_recipe_trains_from_tfds_and_scores_newstest2013(
    module_name, pipelines, data_dir, dev_data_dir, tmp_path
):
    tfds_config, target, vocab_type, frequent_word = PAIRS[module_name]
    module = pipelines(module_name)
    output_dir = tmp_path / "run"

    # The recipe as the paper gives it (the defaults the overrides below start from).
    args = module.parser_for("", list(module.RECIPES)).parse_args(["--output-dir", str(output_dir)])
    recipe = pipelines("wmt14_en_de").recipe_config(args, module.RECIPES)
    assert recipe.data.train[0].tfds == f"wmt14_translate/{tfds_config}"
    assert (recipe.data.train[0].source, recipe.data.train[0].target) == ("en", target)
    assert (recipe.data.vocab_size, recipe.data.vocab_model_type) == (
        {"de": 37000, "fr": 32000}[target],
        vocab_type,
    )  # 5.1
    assert recipe.data.dev.source == str(dev_data_dir / "wmt" / "newstest2013.en")
    assert recipe.data.dev.target == str(dev_data_dir / "wmt" / f"newstest2013.{target}")
    assert (recipe.schedule.train_steps, recipe.schedule.warmup_steps) == (100_000, 4000)  # 5.2-3
    assert recipe.schedule.tokens_per_update == 25_000 and recipe.data.token_budget == 3125
    assert recipe.accumulation_steps(num_replicas=8) == 1  # 8 GPUs x 3125 tokens
    assert (recipe.checkpoints.every_minutes, recipe.checkpoints.average_last) == (10, 5)  # 6.1
    model = recipe.transformer_config(37000)
    assert (
        model.num_layers,
        model.d_model,
        model.d_ff,
        model.num_heads,
        model.dropout,
        model.label_smoothing,
    ) == (6, 512, 2048, 8, 0.1, 0.1)  # Table 3, base

    reads = []
    command = ["--output-dir", str(output_dir)]
    for override in SIZES:
        command += ["--set", override]
    with tfds.testing.mock_data(as_dataset_fn=serve_wmt_text(data_dir, target, reads)):
        assert module.main(command) == 0

    # Reading: the real builder and split, for the vocabulary and for training.
    assert set(reads) == {("wmt14_translate", tfds_config, "train")} and len(reads) >= 2
    run = OutputDir(output_dir)
    # The run is the recipe with exactly the sizes overridden, nothing else.
    with open(run.training_config, encoding="utf-8") as file:
        assert json.load(file) == json.loads(
            TrainingConfig.from_dict(apply_overrides(recipe.to_dict(), SIZES)).to_json()
        )

    # Vocabulary: the recipe's model type, trained on the served EN and target text.
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    with open(run.vocabulary, "rb") as file:
        proto.ParseFromString(file.read())
    assert proto.trainer_spec.model_type == {"unigram": 1, "bpe": 2}[vocab_type]
    assert len(proto.pieces) == 1000
    pieces = {piece.piece for piece in proto.pieces}
    assert {"\u2581the", f"\u2581{frequent_word}"} <= pieces

    # A few training steps, scored on newstest2013 after each evaluation.
    with open(run.history, encoding="utf-8") as file:
        history = json.load(file)
    assert [entry["step"] for entry in history] == [3]
    for entry in history:
        assert math.isfinite(entry["loss"]) and math.isfinite(entry["val_loss"])
        assert entry["val_perplexity"] > 1
    assert os.path.exists(run.averaged_model) and os.path.exists(run.final_model)
