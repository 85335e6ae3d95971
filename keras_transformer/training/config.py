"""`TrainingConfig`: everything a training run needs, from a YAML or JSON file.

A complete file, every key with its default where it has one (YAML; JSON with the same keys
works too; a key left out takes its default):

    output_dir: runs/multi30k
    model:                      # a TransformerConfig preset and field overrides
      preset: base
      num_layers: 3
      d_model: 256
    data:
      train:
        - {source: multi30k/train.en.gz, target: multi30k/train.de.gz}
        # more corpora mix by weight; on_bad_line: skip leaves out pairs that are not UTF-8
        # - {source: crawl.en.gz, target: crawl.de.gz, weight: 0.5, on_bad_line: skip}
      dev: {source: multi30k/val.en.gz, target: multi30k/val.de.gz}
      vocab: null               # a .model file, or null: train one into OUTPUT_DIR/vocab.model
      vocab_size: 8000
      vocab_model_type: bpe     # bpe | unigram
      token_budget: 4096        # tokens per batch per replica and side, padding included
      max_length: 128
      shuffle_buffer: 100000
      cache_dir: null           # a folder: tokenize the corpora once and reuse them
      pad_to_bucket_boundary: false
      seed: 1
    schedule:
      train_steps: 100000
      warmup_steps: 4000
      learning_rate_scale: 1.0
      decay: rsqrt              # rsqrt (the paper) | linear (to 0 at train_steps)
      tokens_per_update: 25000  # target tokens per update: micro-batches are accumulated
      accumulation_steps: null  # micro-batches per update, instead of tokens_per_update
      eval_every_steps: 1000
      log_every_steps: 100
      max_train_minutes: null   # stop after this many minutes of training
    checkpoints:
      every_minutes: 10
      every_steps: null         # instead of every_minutes
      keep_last: 5
      average_last: 5
      average_last_fraction: null  # average the checkpoints of the last fraction of updates
    dev_bleu: {sentences: 500, beam_size: 4, alpha: 0.6, patience: 10, keep_best: true}
    strategy: auto              # auto | one_device | mirrored | multi_worker
    num_devices: null           # devices for mirrored (null: all GPUs)
    precision: float32          # float32 | mixed_bfloat16 | mixed_float16
    xla: false
    verbose: auto
    seed: 1
    init_from: null             # a trained run folder to fine-tune from

A string may name environment variables as `${NAME}` (`source: ${KT_DATA_DIR}/multi30k/
train.en.gz`): `TrainingConfig.from_file` puts in their values, and an unset one is an error
naming the key and the variable. The recipes in `configs/` are such files.

Every key is checked before anything trains: an unknown key or a value of the wrong type
raises one `UserInputError` that names the key (`data.token_budget`), what was found and what
is expected; `TrainingConfig.check_paths()` does the same for missing files.
Reading files, variables and overrides is `config_reading.py`; `reference_markdown()`
(`config_reference.py`; `python -m keras_transformer.training.config` prints it) writes the
reference of every key from these dataclasses and their docstrings.

Example:
    >>> config = TrainingConfig.from_dict({
    ...     "output_dir": "runs/x",
    ...     "data": {"train": [{"source": "a.en", "target": "a.de"}], "vocab": "v.model"}})
    >>> config.schedule.warmup_steps
    4000
"""

import dataclasses
import json
import os
from typing import Literal

import yaml

from keras_transformer._lazy import lazy_exports
from keras_transformer.config import PRESETS, TransformerConfig
from keras_transformer.errors import UserInputError
from keras_transformer.training.config_reading import (  # noqa: F401  (also imported from here)
    apply_changes,
    apply_overrides,
    build_config,
    expand_variables,
    load_config_file,
    read_config_file,
)

# The reference generator reads this module's dataclasses: it is imported from here only when
# asked for (`from keras_transformer.training.config import reference_markdown`).
__getattr__, _, _ = lazy_exports(__name__, {"reference_markdown": "..config_reference"})

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker")
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")


@dataclasses.dataclass(frozen=True)
class CorpusFiles:
    """One parallel corpus: two line-aligned text files (optionally gzipped), or a TFDS name.

    Args:
        source: the source-language file.
        target: the target-language file, line-aligned with `source`.
        weight: sampling weight when several training corpora are mixed.
        tfds: a TensorFlow Datasets name instead of files, e.g. `wmt14_translate/de-en`; then
            `source` and `target` are the feature keys (`en`, `de`).
        split: the TFDS split.
        on_bad_line: "error" (default) stops at a line of the files that is not UTF-8, naming
            it; "skip" leaves that pair out and reports how many were skipped.
    """

    source: str
    target: str
    weight: float = 1.0
    tfds: str | None = None
    split: str = "train"
    on_bad_line: Literal["error", "skip"] = "error"


@dataclasses.dataclass(frozen=True)
class DataSettings:
    """Where the sentence pairs and the vocabulary come from, and how they are batched (5.1).

    Args:
        train: the training corpora (mixed by weight).
        dev: the development corpus for dev loss and perplexity (optional).
        vocab: an existing SentencePiece `.model`; None trains one on the training corpora
            into `OUTPUT_DIR/vocab.model` (reused when the run resumes).
        vocab_size: pieces of a vocabulary trained here (37000 EN-DE, 32000 EN-FR).
        vocab_model_type: "bpe" (EN-DE) or "unigram" (word-piece-like, EN-FR).
        token_budget: most tokens per batch per replica, on each side, padding included.
        max_length: longest source or target (subword pieces + 1) kept for training.
        shuffle_buffer: pairs in the shuffle buffer.
        cache_dir: tokenize corpora once into this folder and reuse them.
        pad_to_bucket_boundary: pad each batch to its bucket's upper length, so that batches
            have one static shape per bucket (set it with `xla: true`, which otherwise
            compiles the train step again for every new batch shape).
        seed: seed of shuffling: the same seed replays the same batches (and resume relies on
            it to find its data position).
    """

    train: tuple[CorpusFiles, ...]
    dev: CorpusFiles | None = None
    vocab: str | None = None
    vocab_size: int = 37000
    vocab_model_type: Literal["bpe", "unigram"] = "bpe"
    token_budget: int = 4096
    max_length: int = 256
    shuffle_buffer: int = 100_000
    cache_dir: str | None = None
    pad_to_bucket_boundary: bool = False
    seed: int = 1


@dataclasses.dataclass(frozen=True)
class ScheduleSettings:
    """Steps, learning rate (5.3) and the size of one update.

    Args:
        train_steps: optimizer updates in all (100000 base, 300000 big).
        warmup_steps: warmup of the Noam schedule (4000).
        learning_rate_scale: factor on the schedule (1.0 in the paper).
        decay: after the warmup, "rsqrt" (the paper's equation 3, `NoamSchedule`) or
            "linear": from the same peak straight down to 0 at `train_steps`
            (`LinearDecaySchedule`, fairseq's `polynomial_decay`), or at `max_train_minutes`
            when the time runs out first (the rate then depends on the machine's speed).
            Raising `train_steps` or the time limit on resume lifts the rate again.
        tokens_per_update: target tokens per optimizer update (paper: about 25000). Micro-
            batches of `token_budget` per replica are accumulated to reach it:
            `accumulation_steps = ceil(tokens_per_update / (token_budget * replicas))`.
        accumulation_steps: micro-batches per update, overriding `tokens_per_update`.
        eval_every_steps: updates between dev evaluations (a Keras "epoch").
        log_every_steps: updates between TensorBoard points.
        max_train_minutes: also stop after this many minutes of training wall time, counted
            over every start of the run (fairseq's `--stop-time-hours`); the run then ends
            as a finished one (final and averaged models). None: no limit.
    """

    train_steps: int = 100_000
    warmup_steps: int = 4000
    learning_rate_scale: float = 1.0
    decay: Literal["rsqrt", "linear"] = "rsqrt"
    tokens_per_update: int = 25_000
    accumulation_steps: int | None = None
    eval_every_steps: int = 1000
    log_every_steps: int = 100
    max_train_minutes: float | None = None


@dataclasses.dataclass(frozen=True)
class CheckpointSettings:
    """When checkpoints are written and how many are kept (6.1: every 10 minutes).

    Args:
        every_minutes: wall-clock minutes between checkpoints (None: not by time).
        every_steps: updates between checkpoints (None: not by steps).
        keep_last: checkpoints kept; older ones are deleted once a newer one is complete.
        average_last: at the end, average the last N checkpoints into `averaged.keras`
            (5 for base, 20 for big; 0 to skip).
        average_last_fraction: average only those of the last N written in this last
            fraction of the updates trained (None: all N). For a run that a time limit may
            stop anywhere: a fixed N would reach back over more of a shorter run.
    """

    every_minutes: float | None = 10.0
    every_steps: int | None = None
    keep_last: int = 5
    average_last: int = 5
    average_last_fraction: float | None = None


@dataclasses.dataclass(frozen=True)
class DevBleuSettings:
    """Dev BLEU after each evaluation (needs `data.dev` as files).

    Args:
        sentences: the first N dev sentences are translated and scored (0: off).
        beam_size: beam size (paper: 4).
        alpha: length penalty (paper: 0.6).
        patience: stop after this many evaluations without a better BLEU (null: never).
        keep_best: keep the best model as `best.keras` (with `best.json`).
    """

    sentences: int = 0
    beam_size: int = 4
    alpha: float = 0.6
    patience: int | None = None
    keep_best: bool = True


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    """A training run: model, data, schedule, checkpoints, devices and numerics.

    Args:
        output_dir: the run folder (layout in `keras_transformer.runs.layout`).
            Running the same config again resumes from its newest checkpoint.
        data: a `DataSettings`.
        model: `{"preset": NAME, FIELD: VALUE, ...}`: a `TransformerConfig` preset and
            overrides of its fields; `vocab_size` comes from the vocabulary.
        schedule: a `ScheduleSettings`.
        checkpoints: a `CheckpointSettings`.
        dev_bleu: a `DevBleuSettings` (off by default).
        strategy: "auto" (all GPUs with MirroredStrategy when there are several, else one
            device), "one_device", "mirrored" (all GPUs, or `num_devices` logical CPUs when
            there is no GPU), or "multi_worker" (MultiWorkerMirroredStrategy from TF_CONFIG).
        num_devices: devices for "mirrored" (default: all GPUs).
        precision: "float32", "mixed_bfloat16" or "mixed_float16" (with loss scaling).
        xla: compile the train step with XLA (`jit_compile`).
        verbose: Keras progress output: "auto", 0 (silent), 1 (progress bar), 2 (a line per
            evaluation).
        seed: seed of weight initialization and dropout (`keras.utils.set_random_seed`), so
            that a run can be repeated; null leaves them unseeded.
        init_from: a trained run folder to fine-tune: this new run starts from its weights
            (`averaged.keras`, else `model.keras`, else its newest checkpoint) and its
            vocabulary, with a fresh optimizer, step 0 and its own schedule and data; the
            model settings must give the same weight shapes. A run that has checkpoints of
            its own resumes from them instead.

    Example:
        >>> config = TrainingConfig.from_file("configs/multi30k.yaml")  # doctest: +SKIP
        >>> train(config)  # doctest: +SKIP
    """

    output_dir: str
    data: DataSettings
    model: dict = dataclasses.field(default_factory=lambda: {"preset": "base"})
    schedule: ScheduleSettings = ScheduleSettings()
    checkpoints: CheckpointSettings = CheckpointSettings()
    dev_bleu: DevBleuSettings = DevBleuSettings()
    strategy: Literal["auto", "one_device", "mirrored", "multi_worker"] = "auto"
    num_devices: int | None = None
    precision: Literal["float32", "mixed_bfloat16", "mixed_float16"] = "float32"
    xla: bool = False
    verbose: Literal["auto"] | int = "auto"
    seed: int | None = 1
    init_from: str | None = None

    def __post_init__(self):
        _check_values(self)

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, values):
        """Builds a config from nested dicts, checking every key and type (see module doc)."""
        return build_config(cls, values)

    @classmethod
    def from_file(cls, path, overrides=(), changes=None):
        """Reads a YAML (`.yaml`, `.yml`) or JSON file, applies `changes` and `overrides`, and
        puts in the `${NAME}` environment variables.

        Relative data, vocabulary and output paths stay relative to the working directory,
        as on the command line.

        Args:
            path: the file.
            overrides: `KEY=VALUE` strings with dotted keys, e.g. `schedule.train_steps=200`;
                values are read as YAML (`200` is an integer, `null` is None).
            changes: `{dotted key: value}` with Python values (a list of corpora, a path),
                applied before `overrides`: how a program adapts a recipe file.
        """
        return load_config_file(cls, path, overrides, changes)

    def to_dict(self):
        return dataclasses.asdict(self)

    def to_json(self, indent=2):
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True)

    def to_yaml(self):
        """Every setting as YAML, in the order of the dataclasses; `from_file` reads it back."""

        plain = json.loads(json.dumps(self.to_dict()))  # tuples as lists
        return yaml.safe_dump(plain, sort_keys=False, allow_unicode=True)

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    # -- derived settings --------------------------------------------------------------------

    def transformer_config(self, vocab_size):
        """The model's `TransformerConfig`: the preset, the overrides and `vocab_size`."""
        overrides = {k: v for k, v in self.model.items() if k != "preset"}
        return TransformerConfig.from_preset(
            self.model.get("preset", "base"), vocab_size=vocab_size, **overrides
        )

    def accumulation_steps(self, num_replicas):
        """Micro-batches per update for `num_replicas` replicas (at least 1)."""
        if self.schedule.accumulation_steps is not None:
            return self.schedule.accumulation_steps
        per_micro_batch = self.data.token_budget * num_replicas
        return max(1, -(-self.schedule.tokens_per_update // per_micro_batch))

    def check_paths(self):
        """Raises `UserInputError` for a missing data or vocabulary file, before training."""
        missing = self.missing_files()
        if missing:
            raise UserInputError(missing[0])

    def missing_files(self):
        """One message per data or vocabulary file that is not there (`data.dev.source: file
        'x' does not exist; check the path`); TFDS corpora are not files."""
        files = []
        for index, corpus in enumerate(self.data.train):
            if corpus.tfds is None:
                files.append((f"data.train[{index}].source", corpus.source))
                files.append((f"data.train[{index}].target", corpus.target))
        if self.data.dev is not None and self.data.dev.tfds is None:
            files.append(("data.dev.source", self.data.dev.source))
            files.append(("data.dev.target", self.data.dev.target))
        if self.data.vocab is not None:
            files.append(("data.vocab", self.data.vocab))
        messages = []
        for key, path in files:
            if not os.path.isfile(path):
                what = "is a directory" if os.path.isdir(path) else "does not exist"
                messages.append(f"{key}: file {path!r} {what}; check the path")
        return messages


def _check_values(config):
    """Raises `UserInputError` naming the first key whose value is out of its range or at odds
    with another key's (the types are checked already, by `build_config`)."""
    _check_positive(config)
    _check_dev_bleu(config)
    _check_schedule(config)
    _check_data(config)
    _check_checkpoints(config)
    _check_model(config)
    _check_run(config)


def _fail(key, message):
    raise UserInputError(f"{key}: {message}")


def _check_positive(config):
    positive = {
        "data.vocab_size": config.data.vocab_size,
        "data.token_budget": config.data.token_budget,
        "data.max_length": config.data.max_length,
        "data.shuffle_buffer": config.data.shuffle_buffer,
        "schedule.train_steps": config.schedule.train_steps,
        "schedule.warmup_steps": config.schedule.warmup_steps,
        "schedule.tokens_per_update": config.schedule.tokens_per_update,
        "schedule.eval_every_steps": config.schedule.eval_every_steps,
        "schedule.log_every_steps": config.schedule.log_every_steps,
        "checkpoints.keep_last": config.checkpoints.keep_last,
    }
    optional_positive = {
        "schedule.accumulation_steps": config.schedule.accumulation_steps,
        "checkpoints.every_steps": config.checkpoints.every_steps,
        "checkpoints.every_minutes": config.checkpoints.every_minutes,
        "schedule.max_train_minutes": config.schedule.max_train_minutes,
        "num_devices": config.num_devices,
    }
    # `not value > 0` also refuses NaN (YAML's .nan), which every comparison would let through.
    for key, value in positive.items():
        if not value > 0:
            _fail(key, f"must be positive, got {value}")
    for key, value in optional_positive.items():
        if value is not None and not value > 0:
            _fail(key, f"must be positive or null, got {value}")


def _check_dev_bleu(config):
    bleu = config.dev_bleu
    if bleu.sentences < 0:
        _fail("dev_bleu.sentences", f"must be 0 (off) or positive, got {bleu.sentences}")
    if bleu.beam_size < 1:
        _fail("dev_bleu.beam_size", f"must be positive, got {bleu.beam_size}")
    if bleu.patience is not None and bleu.patience < 1:
        _fail("dev_bleu.patience", f"must be positive or null, got {bleu.patience}")
    if bleu.sentences and (config.data.dev is None or config.data.dev.tfds is not None):
        _fail("dev_bleu.sentences", "needs data.dev as source/target files")


def _check_schedule(config):
    schedule = config.schedule
    if schedule.learning_rate_scale <= 0:
        _fail("schedule.learning_rate_scale", "must be positive")
    if schedule.decay == "linear" and not schedule.warmup_steps < schedule.train_steps:
        _fail(
            "schedule.warmup_steps",
            f"({schedule.warmup_steps}) must be below "
            f"schedule.train_steps ({schedule.train_steps}) with decay 'linear', "
            "which falls from the warmup's end to 0 at train_steps: raise train_steps, "
            "lower warmup_steps, or use decay 'rsqrt'",
        )


def _check_data(config):
    if not config.data.train:
        _fail("data.train", "needs at least one corpus")
    for index, corpus in enumerate(config.data.train):
        if corpus.weight <= 0:
            _fail(f"data.train[{index}].weight", f"must be positive, got {corpus.weight}")
    if config.data.token_budget < config.data.max_length:
        _fail(
            "data.token_budget",
            f"({config.data.token_budget}) must hold one pair of "
            f"data.max_length ({config.data.max_length}): raise it or lower max_length",
        )


def _check_checkpoints(config):
    average, keep = config.checkpoints.average_last, config.checkpoints.keep_last
    if average < 0:
        _fail("checkpoints.average_last", f"must be 0 (no averaging) or positive, got {average}")
    if average > keep:
        _fail(
            "checkpoints.average_last",
            f"averages {average} checkpoints but "
            f"checkpoints.keep_last keeps only {keep}: raise keep_last to at least {average}",
        )
    fraction = config.checkpoints.average_last_fraction
    if fraction is not None and not 0 < fraction <= 1:
        _fail(
            "checkpoints.average_last_fraction",
            f"must be a share of the updates, above 0 and at most 1, got {fraction}",
        )


def _check_model(config):
    if not isinstance(config.model, dict):
        _fail("model", "must be a mapping like {preset: base, num_layers: 2}")
    preset = config.model.get("preset", "base")
    if preset not in PRESETS:
        _fail("model.preset", f"unknown preset {preset!r}; choose one of: {', '.join(PRESETS)}")
    if "vocab_size" in config.model:
        _fail(
            "model.vocab_size",
            "is taken from the vocabulary (data.vocab or data.vocab_size); remove it from model",
        )
    try:  # the overrides are TransformerConfig fields: check them now, not after data prep
        config.transformer_config(vocab_size=max(config.data.vocab_size, 8))
    except UserInputError as error:
        raise UserInputError(f"model: {error}") from None


def _check_run(config):
    """The run folder to start from, and the devices."""
    if config.init_from is not None:
        if not config.init_from.strip():
            _fail("init_from", "is empty; give the output_dir of a trained run, or null")
        if os.path.abspath(config.init_from) == os.path.abspath(config.output_dir):
            _fail(
                "init_from",
                f"names the run folder itself ({config.output_dir!r}); a fine-tuned run "
                "needs an output_dir of its own",
            )
    if config.schedule.max_train_minutes is not None and config.strategy == "multi_worker":
        # Each host would read its own clock and might stop one update before the others,
        # which then wait in an all-reduce forever.
        _fail(
            "schedule.max_train_minutes",
            "cannot stop the hosts of strategy multi_worker "
            "at the same update; bound the run with schedule.train_steps instead",
        )
    if config.num_devices is not None and config.strategy != "mirrored":
        _fail(
            "num_devices", f"applies to strategy 'mirrored' only (strategy is {config.strategy!r})"
        )
    if config.verbose not in ("auto", 0, 1, 2):
        _fail("verbose", f"must be 'auto', 0, 1 or 2, got {config.verbose!r}")


if __name__ == "__main__":
    # The reference imports this module, so it runs as its own module, not imported here.
    import runpy

    runpy.run_module("keras_transformer.training.config_reference", run_name="__main__")
