"""The recipes in configs/: each loads and passes `train --check`; the quickstart and Multi30k
recipes resolve to the settings written out below, key by key, from the file and through
their pipelines; every configs/ file the tree names exists; the configuration reference
names every key."""

import dataclasses
import os
import re
import subprocess
import sys
import typing

import pytest
import yaml

from keras_transformer.cli import main as cli
from keras_transformer.config import TransformerConfig
from keras_transformer.training.config import TrainingConfig
from keras_transformer.training.config_reference import reference_markdown
from tests._training_fixtures import REPO, load_pipeline

CONFIGS = sorted((REPO / "configs").glob("*.yaml"))

CORPUS = {"on_bad_line": "error", "split": "train", "tfds": None, "weight": 1.0}

# Every setting of the quickstart as `make quickstart` trains it, written out by hand.
QUICKSTART = {
    "output_dir": "runs/quickstart",
    "model": {
        "preset": "base",
        "num_layers": 2,
        "d_model": 128,
        "d_ff": 512,
        "num_heads": 4,
        "key_dim": 64,
        "value_dim": 64,
        "dropout": 0.1,
        "max_length": 128,
    },
    "data": {
        "train": [
            {
                **CORPUS,
                "source": "runs/quickstart/corpus/train.en",
                "target": "runs/quickstart/corpus/train.de",
            }
        ],
        "dev": {
            **CORPUS,
            "source": "runs/quickstart/corpus/dev.en",
            "target": "runs/quickstart/corpus/dev.de",
        },
        "vocab": None,
        "vocab_size": 1000,
        "vocab_model_type": "bpe",
        "token_budget": 3072,
        "max_length": 64,
        "shuffle_buffer": 50000,
        "cache_dir": None,
        "pad_to_bucket_boundary": False,
        "seed": 1,
    },
    "schedule": {
        "train_steps": 1800,
        "warmup_steps": 300,
        "learning_rate_scale": 2.0,
        "decay": "linear",
        "tokens_per_update": 3072,
        "accumulation_steps": None,
        "eval_every_steps": 450,
        "log_every_steps": 25,
        "max_train_minutes": 6.0,
    },
    "checkpoints": {
        "every_minutes": None,
        "every_steps": 180,
        "keep_last": 5,
        "average_last": 3,
        "average_last_fraction": None,
    },
    "dev_bleu": {
        "sentences": 100,
        "beam_size": 4,
        "alpha": 0.6,
        "patience": None,
        "keep_best": True,
    },
    "strategy": "one_device",
    "num_devices": None,
    "precision": "float32",
    "xla": False,
    "verbose": "auto",
    "seed": 1,
    "init_from": None,
}

# Fine-tuning the quickstart model on spans of time: the quickstart's model and data
# settings on the small in-domain set mixed with the quickstart's own, with a fresh, shorter,
# gentler schedule.
_FINETUNE_CORPUS = "runs/quickstart_finetune/corpus"
QUICKSTART_FINETUNE = {
    **QUICKSTART,
    "output_dir": "runs/quickstart_finetune",
    "init_from": "runs/quickstart",
    "data": {
        **QUICKSTART["data"],
        "train": [  # the new domain, and the quickstart's corpus against forgetting
            {
                **CORPUS,
                "source": f"{_FINETUNE_CORPUS}/train.en",
                "target": f"{_FINETUNE_CORPUS}/train.de",
            },
            QUICKSTART["data"]["train"][0],
        ],
        "dev": {
            **CORPUS,
            "source": f"{_FINETUNE_CORPUS}/dev.en",
            "target": f"{_FINETUNE_CORPUS}/dev.de",
        },
        "vocab_size": 37000,  # the default, unused: the vocabulary is runs/quickstart's
        "shuffle_buffer": 5000,
    },
    "schedule": {
        **QUICKSTART["schedule"],
        "train_steps": 300,
        "warmup_steps": 50,
        "learning_rate_scale": 0.2,
        "eval_every_steps": 100,
        "max_train_minutes": None,
    },
    "checkpoints": {**QUICKSTART["checkpoints"], "every_steps": 50},
}

# Wu et al. (2021)'s Transformer-tiny recipe on the prepared (lower-cased, tokenized) text.
MULTI30K = {
    "output_dir": "runs/multi30k_en_de",
    "model": {
        "preset": "base",
        "num_layers": 4,
        "d_model": 128,
        "d_ff": 256,
        "num_heads": 4,
        "key_dim": 32,
        "value_dim": 32,
        "dropout": 0.3,
        "max_length": 128,
    },
    "data": {
        "train": [
            {
                **CORPUS,
                "source": "runs/multi30k_en_de/data/train.en.txt",
                "target": "runs/multi30k_en_de/data/train.de.txt",
            }
        ],
        "dev": {
            **CORPUS,
            "source": "runs/multi30k_en_de/data/val.en.txt",
            "target": "runs/multi30k_en_de/data/val.de.txt",
        },
        "vocab": None,
        "vocab_size": 10000,
        "vocab_model_type": "bpe",
        "token_budget": 8192,
        "max_length": 128,
        "shuffle_buffer": 30000,
        "cache_dir": None,
        "pad_to_bucket_boundary": False,
        "seed": 1,
    },
    "schedule": {
        "train_steps": 8000,
        "warmup_steps": 2000,
        "learning_rate_scale": 2.53,
        "decay": "rsqrt",
        "tokens_per_update": 8192,
        "accumulation_steps": None,
        "eval_every_steps": 1000,
        "log_every_steps": 100,
        "max_train_minutes": None,
    },
    "checkpoints": {
        "every_minutes": None,
        "every_steps": 200,
        "keep_last": 10,
        "average_last": 10,
        "average_last_fraction": None,
    },
    "dev_bleu": {"sentences": 0, "beam_size": 4, "alpha": 0.6, "patience": None, "keep_best": True},
    "strategy": "auto",
    "num_devices": None,
    "precision": "float32",
    "xla": False,
    "verbose": "auto",
    "seed": 1,
    "init_from": None,
}


def assert_same_settings(config, expected):
    """`config` (a TrainingConfig) has exactly `expected`'s settings, compared key by key so
    that a failure names the key."""
    found = _flatten(config.to_dict())
    wanted = _flatten(expected)
    assert sorted(found) == sorted(wanted)
    for key, value in wanted.items():
        assert found[key] == value, key


def _flatten(values, prefix=""):
    if isinstance(values, (list, tuple)):
        values = dict(enumerate(values))
    if not isinstance(values, dict) or (prefix == "model" and not values):
        return {prefix: values}
    flat = {}
    for key, value in values.items():
        flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


@pytest.mark.parametrize(
    "name, expected",
    [
        ("quickstart", QUICKSTART),
        ("quickstart_finetune", QUICKSTART_FINETUNE),
        ("multi30k", MULTI30K),
    ],
)
def test_recipe_file_resolves_to_the_written_out_settings(name, expected):
    assert_same_settings(TrainingConfig.from_file(REPO / "configs" / f"{name}.yaml"), expected)


def test_quickstart_pipeline_trains_the_recipe_file(tmp_path, monkeypatch, capsys):
    """`python pipelines/quickstart.py` trains what `train --config configs/quickstart.yaml`
    does, on the corpus that `--data-only` writes where the file expects it."""
    monkeypatch.chdir(tmp_path)
    quickstart = load_pipeline("quickstart")
    assert quickstart.main(["--data-only"]) == 0
    printed = capsys.readouterr().out
    assert "runs/quickstart/corpus/train.en  runs/quickstart/corpus/train.de" in printed
    corpus = quickstart.write_corpus()
    for split in ("train", "dev"):
        for path in corpus[split]:
            assert os.path.isfile(path)
    assert [str(p) for p in corpus["train"]] == [
        QUICKSTART["data"]["train"][0]["source"],
        QUICKSTART["data"]["train"][0]["target"],
    ]
    assert not (tmp_path / "runs" / "quickstart" / "config.json").exists()  # nothing trained
    config = quickstart.training_config("runs/quickstart", corpus)
    assert_same_settings(config, QUICKSTART)
    # --steps scales the intervals as the file's proportions give them.
    short = quickstart.training_config(steps=900).schedule
    assert (short.train_steps, short.warmup_steps, short.eval_every_steps) == (900, 150, 225)


def test_quickstart_finetune_pipeline_writes_the_corpus_where_the_recipe_reads_it(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    finetune = load_pipeline("quickstart_finetune")
    assert finetune.main([]) == 0
    printed = capsys.readouterr().out
    data = QUICKSTART_FINETUNE["data"]
    for corpus in (data["train"][0], data["dev"]):
        assert f"{corpus['source']}  {corpus['target']}" in printed
        assert os.path.isfile(corpus["source"]) and os.path.isfile(corpus["target"])
    assert "keras-transformer train --config" in printed
    english = (tmp_path / _FINETUNE_CORPUS / "train.en").read_text(encoding="utf-8")
    assert " ago\n" in english and "for " in english  # spans of time, not the quickstart's
    assert len(set(english.splitlines())) == 2000


def test_multi30k_pipeline_trains_the_recipe_file():
    multi30k = load_pipeline("multi30k")
    prepared = os.path.join(multi30k.default_output_dir("de"), "data")
    assert_same_settings(multi30k.multi30k_config(prepared, extension=".txt"), MULTI30K)


# The other recipes, as their pipelines' Python constants gave them before the files existed.
OTHERS = {
    "wmt14_en_de_base": {
        "output_dir": "runs/wmt14_en_de_base",
        "model": {"preset": "base", "max_length": 256},
        "data": {
            "train": [{"tfds": "wmt14_translate/de-en", "source": "en", "target": "de"}],
            "dev": {
                "source": "DATA/wmt/newstest2013.en",
                "target": "DATA/wmt/newstest2013.de",
            },
            "token_budget": 3125,
        },
    },
    "wmt14_en_de_big": {
        "output_dir": "runs/wmt14_en_de_big",
        "model": {"preset": "big", "max_length": 256},
        "data": {
            "train": [{"tfds": "wmt14_translate/de-en", "source": "en", "target": "de"}],
            "dev": {
                "source": "DATA/wmt/newstest2013.en",
                "target": "DATA/wmt/newstest2013.de",
            },
            "token_budget": 3125,
        },
        "schedule": {"train_steps": 300_000},
        "checkpoints": {"keep_last": 20, "average_last": 20},
    },
    "wmt14_en_fr_base": {
        "output_dir": "runs/wmt14_en_fr_base",
        "model": {"preset": "base", "max_length": 256},
        "data": {
            "train": [{"tfds": "wmt14_translate/fr-en", "source": "en", "target": "fr"}],
            "dev": {
                "source": "DATA/wmt/newstest2013.en",
                "target": "DATA/wmt/newstest2013.fr",
            },
            "vocab_size": 32000,
            "vocab_model_type": "unigram",
            "token_budget": 3125,
        },
    },
    "wmt14_en_fr_big": {
        "output_dir": "runs/wmt14_en_fr_big_en_fr",
        "model": {"preset": "big_en_fr", "max_length": 256},
        "data": {
            "train": [{"tfds": "wmt14_translate/fr-en", "source": "en", "target": "fr"}],
            "dev": {
                "source": "DATA/wmt/newstest2013.en",
                "target": "DATA/wmt/newstest2013.fr",
            },
            "vocab_size": 32000,
            "vocab_model_type": "unigram",
            "token_budget": 3125,
        },
        "schedule": {"train_steps": 300_000},
        "checkpoints": {"keep_last": 20, "average_last": 20},
    },
}


def _parsing(run, gum, model, schedule, checkpoints, token_budget):
    names = ["wsj", "gum"] if gum else ["wsj"]
    return {
        "output_dir": run,
        "model": model,
        "data": {
            "train": [
                {
                    "source": f"{run}/data/{n}.train.words",
                    "target": f"{run}/data/{n}.train.trees.lin",
                }
                for n in names
            ],
            "dev": {
                "source": f"{run}/data/wsj.dev.words",
                "target": f"{run}/data/wsj.dev.trees.lin",
            },
            "vocab": f"{run}/data/parsing_vocab.model",
            "token_budget": token_budget,
            "max_length": 512,
            "shuffle_buffer": 20000,
        },
        "schedule": schedule,
        "checkpoints": checkpoints,
    }


CPU_MODEL = {
    "preset": "base",
    "num_layers": 4,
    "d_model": 256,
    "d_ff": 1024,
    "num_heads": 4,
    "key_dim": 64,
    "value_dim": 64,
    "max_length": 1024,
}
CPU_SCHEDULE = {
    "warmup_steps": 500,
    "decay": "linear",
    "tokens_per_update": 2048,
    "eval_every_steps": 500,
    "log_every_steps": 50,
    "max_train_minutes": 120,
}
CPU_CHECKPOINTS = {
    "every_minutes": None,
    "every_steps": 500,
    "keep_last": 20,
    "average_last": 20,
    "average_last_fraction": 0.35,
}
PAPER_SCHEDULE = {"train_steps": 20000, "tokens_per_update": 25000}
OTHERS.update(
    {
        "ptb_wsj": _parsing(
            "runs/ptb_parsing_wsj",
            False,
            {"preset": "parsing_wsj", "max_length": 1024},
            PAPER_SCHEDULE,
            {},
            4096,
        ),
        "ptb_wsj_gum": _parsing(
            "runs/ptb_parsing_wsj_gum",
            True,
            {"preset": "parsing_semi", "max_length": 1024},
            PAPER_SCHEDULE,
            {},
            4096,
        ),
        "ptb_wsj_cpu": _parsing(
            "runs/ptb_parsing_wsj_cpu",
            False,
            {**CPU_MODEL, "dropout": 0.2, "attention_dropout": 0.0},
            {**CPU_SCHEDULE, "train_steps": 18000, "learning_rate_scale": 0.3},
            CPU_CHECKPOINTS,
            2048,
        ),
        "ptb_wsj_gum_cpu": _parsing(
            "runs/ptb_parsing_wsj_gum_cpu",
            True,
            {**CPU_MODEL, "dropout": 0.1, "attention_dropout": 0.1},
            {**CPU_SCHEDULE, "train_steps": 20000, "learning_rate_scale": 0.2},
            CPU_CHECKPOINTS,
            2048,
        ),
    }
)


def test_the_recipes_are_the_nine_named_ones_and_two_more():
    expected = ["quickstart", "quickstart_finetune", "multi30k", *OTHERS]
    assert [path.stem for path in CONFIGS] == sorted(expected)


@pytest.mark.parametrize("name", sorted(OTHERS))
def test_other_recipes_resolve_to_their_settings(name, monkeypatch):
    monkeypatch.setenv("KT_DATA_DIR", "DATA")
    expected = TrainingConfig.from_dict(OTHERS[name])
    assert_same_settings(
        TrainingConfig.from_file(REPO / "configs" / f"{name}.yaml"), expected.to_dict()
    )


# -- train --check -------------------------------------------------------------------------------


def _check(capsys, *args):
    code = cli(["train", "--check", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("path", CONFIGS, ids=lambda path: path.stem)
def test_every_recipe_passes_check_and_nothing_is_written(path, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KT_DATA_DIR", str(tmp_path / "data"))
    code, out, err = _check(capsys, "--config", str(path))
    assert code == 0, err
    # The resolved settings, as YAML that loads back into the same config.
    assert TrainingConfig.from_dict(yaml.safe_load(out)) == TrainingConfig.from_file(path)
    # Data not prepared yet: warnings, one per file, naming the key; and the run to
    # fine-tune, not trained yet.
    for line in err.strip().splitlines():
        assert re.match(
            r"keras-transformer train: warning: (data\.(train\[\d\]|dev|vocab)|init_from)", line
        ), line
    if path.stem == "quickstart_finetune":
        assert "warning: init_from: folder 'runs/quickstart' does not exist" in err
    assert list(tmp_path.iterdir()) == []


def test_check_names_a_bad_key_and_exits_1(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.yaml"
    text = (REPO / "configs" / "quickstart.yaml").read_text()
    bad.write_text(text.replace("  token_budget: 3072", "  token_budjet: 3072"))
    code, out, err = _check(capsys, "--config", str(bad))
    assert code == 1 and out == ""
    assert "unknown key(s) data.token_budjet" in err and str(bad) in err
    code, _, err = _check(capsys, "--config", str(bad), "--set", "data.max_length=many")
    assert code == 1
    assert list(tmp_path.iterdir()) == [bad]


def test_check_warns_of_missing_data_files_and_exits_0(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "train.en").write_text("one\n")
    code, out, err = _check(
        capsys,
        "--config",
        str(REPO / "configs" / "quickstart.yaml"),
        "--set",
        f"data.train=[{{source: {corpus}/train.en, target: {corpus}/train.de}}]",
    )
    assert code == 0
    warnings = err.strip().splitlines()
    assert warnings[0] == (
        f"keras-transformer train: warning: data.train[0].target: file '{corpus}/train.de' "
        "does not exist; check the path"
    )
    assert [w.split(": ")[2] for w in warnings] == [
        "data.train[0].target",
        "data.dev.source",
        "data.dev.target",
    ]
    assert yaml.safe_load(out)["data"]["train"][0]["source"] == f"{corpus}/train.en"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


def test_check_imports_no_tensorflow(tmp_path):
    # A fresh interpreter: this one has imported TensorFlow already.
    code = (
        "import sys\n"
        "from keras_transformer.cli import main\n"
        f"status = main(['train', '--check', '--config', {str(REPO / 'configs' / 'quickstart.yaml')!r}])\n"
        "assert status == 0, status\n"
        "print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "KT_DATA_DIR": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    assert "output_dir: runs/quickstart" in result.stdout  # the check ran
    assert result.stdout.splitlines()[-1] == "[]"


def test_an_unset_variable_is_an_error_naming_the_key(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("KT_DATA_DIR", raising=False)
    code, _, err = _check(capsys, "--config", str(REPO / "configs" / "wmt14_en_de_base.yaml"))
    assert code == 1
    assert "data.dev.source: the environment variable KT_DATA_DIR" in err


def test_every_named_recipe_exists():
    named = set()
    paths = [REPO / "README.md"]
    for folder in ("docs", "keras_transformer", "pipelines"):
        paths += [p for p in (REPO / folder).rglob("*") if p.suffix in (".md", ".py", ".yml")]
    for path in paths:
        named |= set(
            re.findall(r"configs/([a-z0-9][\w.-]*\.ya?ml)", path.read_text(encoding="utf-8"))
        )
    # The search finds what `train --help` names (placeholders such as NAME.yaml are not names).
    assert "multi30k.yaml" in named
    assert sorted(name for name in named if not (REPO / "configs" / name).is_file()) == []


# -- the configuration reference ---------------------------------------------------------------


def _keys(cls, prefix=""):
    """Every dotted key of dataclass `cls`, walked here from the type hints."""
    keys = []
    for field in dataclasses.fields(cls):
        key = f"{prefix}{field.name}"
        kind = typing.get_type_hints(cls)[field.name]
        options = [a for a in typing.get_args(kind) if a is not type(None)] or [kind]
        if typing.get_origin(kind) is tuple:
            keys += _keys(typing.get_args(kind)[0], f"{key}[].")
        elif dataclasses.is_dataclass(options[0]):
            keys += _keys(options[0], f"{key}.")
        elif key == "model":
            keys += ["model.preset"] + [
                f"model.{f.name}" for f in dataclasses.fields(TransformerConfig)
            ]
        else:
            keys.append(key)
    return keys


def test_the_reference_names_every_key_with_its_docstring_meaning():
    text = reference_markdown()
    keys = _keys(TrainingConfig)
    assert len(keys) > 60 and "data.dev.tfds" in keys and "model.label_smoothing" in keys
    assert [key for key in keys if f"`{key}`" not in text] == []
    rows = {
        line.split(" | ")[0][3:-1]: line for line in text.splitlines() if line.startswith("| `")
    }
    assert "most tokens per batch per replica, on each side" in rows["data.token_budget"]
    assert rows["checkpoints.keep_last"].split(" | ")[1:3] == ["integer", "`5`"]
    assert rows["model.dropout"].split(" | ")[1:3] == ["number", "`0.1`"]
    assert rows["schedule.decay"].split(" | ")[1] == "`rsqrt` or `linear`"
