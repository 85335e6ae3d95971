"""Shared helpers of the training tests (tests/test_training_*.py).

A synthetic word-reversal task (target = source words in reverse order) written as two
line-aligned files: real text for the whole pipeline (vocabulary, tokenizer, buckets) that a
1-layer, d_model 32 model learns visibly within a few dozen steps on a CPU.
"""

import json
import os
import pathlib
import random
import sys

import numpy as np

from tests import _preloaded_python, _tensorflow_settings

REPO = pathlib.Path(__file__).resolve().parents[1]
PYTHON = sys.executable


def load_pipeline(name):
    """A `pipelines/NAME.py` script as a module (the pipelines are scripts, not a package)."""
    return _load_script(REPO / "pipelines" / f"{name}.py", name)


def _load_script(path, module_name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_reverse_corpus(directory, train_lines=400, dev_lines=40, seed=0):
    """Writes train.src/.tgt and dev.src/.tgt; returns their paths in a dict."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 5))) for _ in range(60)]
    paths = {}
    for split, count in (("train", train_lines), ("dev", dev_lines)):
        source, target = directory / f"{split}.src", directory / f"{split}.tgt"
        with open(source, "w") as src, open(target, "w") as tgt:
            for _ in range(count):
                sentence = [rng.choice(words) for _ in range(rng.randint(2, 9))]
                src.write(" ".join(sentence) + "\n")
                tgt.write(" ".join(reversed(sentence)) + "\n")
        paths[f"{split}_source"], paths[f"{split}_target"] = str(source), str(target)
    return paths


def tiny_config(output_dir, corpus, **sections):
    """A TrainingConfig dict of a 1-layer d_model 32 model on `corpus`; `sections` update
    the top-level keys or, given as dicts, merge into the sections."""
    config = {
        "output_dir": str(output_dir),
        "model": {
            "preset": "base",
            "num_layers": 1,
            "d_model": 32,
            "d_ff": 64,
            "num_heads": 4,
            "dropout": 0.0,
        },
        "data": {
            "train": [{"source": corpus["train_source"], "target": corpus["train_target"]}],
            "dev": {"source": corpus["dev_source"], "target": corpus["dev_target"]},
            "vocab_size": 320,
            "token_budget": 256,
            "max_length": 64,
            "shuffle_buffer": 1000,
        },
        "schedule": {
            "train_steps": 12,
            "warmup_steps": 10,
            "tokens_per_update": 256,
            "eval_every_steps": 6,
            "log_every_steps": 3,
        },
        "checkpoints": {"every_minutes": None, "every_steps": 3, "keep_last": 4, "average_last": 2},
        "verbose": 0,
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


def write_config(path, config):
    with open(path, "w") as file:
        json.dump(config, file)
    return str(path)


def subprocess_env(*, users_kernels=False, path_first=(), **extra):
    """Environment for child Python processes: the repo importable, quiet TensorFlow, no
    TF_CONFIG (a worker sets its own), matplotlib without a display; `extra` on top.

    Args:
        users_kernels: TensorFlow's kernel choice as the user had it (the quickstart, the
            documented pages), not the test processes' (tests/_tensorflow_settings.py).
        path_first: folders put first on PATH, before this interpreter's own bin folder
            (the `keras-transformer` command of the pages).
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    if path_first:
        env["PATH"] = os.pathsep.join(
            [*path_first, str(pathlib.Path(PYTHON).parent), env.get("PATH", "")]
        )
    env.setdefault("KERAS_BACKEND", "tensorflow")
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["MPLBACKEND"] = "Agg"
    env.pop("TF_CONFIG", None)
    if users_kernels:
        env = _tensorflow_settings.user_environment(env)
    env.update(extra)
    return env


def run_python(code, timeout=240, **env):
    """Runs `code` in a new interpreter (forked from tests/_preloaded_python.py's server);
    returns the CompletedProcess (asserting success)."""
    result = _preloaded_python.run(
        [PYTHON, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=subprocess_env(**env),
        cwd=REPO,
    )
    assert result.returncode == 0, (
        f"child failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    )
    return result


def max_abs_difference(weights_a, weights_b):
    assert len(weights_a) == len(weights_b)
    return max(
        float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(weights_a, weights_b)
    )
