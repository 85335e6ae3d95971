"""`train(config)`: the training entry point of the library, the CLI and the pipelines.

One call runs a whole paper recipe (section 5): check the config, pick the strategy, prepare
the vocabulary and the run folder, build the model, optimizer and token-budget batches,
restore the newest checkpoint if the run was interrupted, `model.fit` to `train_steps`, then
save the final model and the average of the last checkpoints (6.1).

Beside this loop: `inputs.py` (corpora, vocabulary, batches and the data position),
`finetune.py` (`init_from`), `run_files.py` (config.json, training_config.json, init.json).
"""

import contextlib
import dataclasses
import logging
import os
import shutil
import time
from collections.abc import Callable

import keras

from keras_transformer.data.marian_vocabulary import MarianVocabulary, is_marian_folder
from keras_transformer.errors import UserInputError
from keras_transformer.model import build_model
from keras_transformer.runs.averaging import average_checkpoints, in_last_fraction
from keras_transformer.runs.checkpoints import Checkpointer, list_checkpoints
from keras_transformer.runs.layout import OutputDir
from keras_transformer.runs.models import atomic_save_model
from keras_transformer.schedules import build_optimizer
from keras_transformer.training import finetune, inputs, run_files
from keras_transformer.training.callbacks import (
    NaNGuard,
    StopAfterMinutes,
    StopAtStep,
    TrainingLogger,
)
from keras_transformer.training.checkpoints import CheckpointCallback
from keras_transformer.training.config import TrainingConfig
from keras_transformer.training.dev_bleu import DevBleu
from keras_transformer.training.run_files import TRAINING_ONLY_FIELDS  # noqa: F401  (its old home)
from keras_transformer.training.strategies import is_chief, make_strategy
from keras_transformer.training.training_model import TrainingModel, read_value

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class TrainingResult:
    """What a finished `train` call leaves behind.

    Args:
        output_dir: the run folder (`OutputDir`).
        step: the optimizer step reached.
        resumed_from_step: the step restored from a checkpoint at start (0: a fresh run).
        accumulation_steps: micro-batches per update.
        num_replicas: replicas in sync.
        final_model: path of `model.keras`.
        averaged_model: path of `averaged.keras`, or None when averaging was off or too few
            checkpoints existed.
        history: the metrics of this call's evaluations (Keras `History.history`).
        model: the trained `Transformer` (final weights).
        train_seconds: training wall time over every start of the run.
        stopped_by_time: whether `schedule.max_train_minutes` ended training before
            `schedule.train_steps`.
        initialized_from: the weights file of `init_from` this start began with, or None.
    """

    output_dir: OutputDir
    step: int
    resumed_from_step: int
    accumulation_steps: int
    num_replicas: int
    final_model: str
    averaged_model: str | None
    history: dict
    model: object = dataclasses.field(repr=False, default=None)
    train_seconds: float = 0.0
    stopped_by_time: bool = False
    initialized_from: str | None = None

    def summary(self):
        """Where the outputs went, one per line (printed by the CLI and the pipelines)."""
        run = self.output_dir
        lines = []
        if self.resumed_from_step:
            lines.append(f"resumed from the checkpoint of step {self.resumed_from_step}")
        if self.initialized_from:
            lines.append(f"started from the weights of {self.initialized_from}")
        # (A run whose checkpoints predate the clock has no time to show.)
        minutes = f" ({self.train_seconds / 60:.1f} min of training)" if self.train_seconds else ""
        lines.append(f"trained to step {self.step} in {run.path}{minutes}")
        if self.stopped_by_time:
            lines.append("  stopped by schedule.max_train_minutes before schedule.train_steps")
        lines.append(f"  final model:     {self.final_model}")
        if self.averaged_model:
            lines.append(f"  averaged model:  {self.averaged_model}")
        lines.append(f"  model config:    {run.model_config}")
        lines.append(f"  vocabulary:      {run.vocabulary}")
        lines.append(f"  checkpoints:     {run.checkpoint_dir}")
        lines.append(f"  TensorBoard:     tensorboard --logdir {run.log_dir}")
        lines.append(f"  translate with:  {run.translation_model}")
        return "\n".join(lines)


def load_training_config(config):
    """A `TrainingConfig` from a config, a dict, or a YAML/JSON file path."""
    if isinstance(config, TrainingConfig):
        return config
    if isinstance(config, dict):
        return TrainingConfig.from_dict(config)
    if isinstance(config, (str, os.PathLike)):
        return TrainingConfig.from_file(config)
    raise UserInputError(
        f"train() takes a TrainingConfig, a dict or a config file path, got {type(config).__name__}"
    )


def train(config, callbacks=None):
    """Trains (or resumes training) a Transformer as `config` says.

    Running the same config again after an interruption (even SIGKILL) continues from the
    newest checkpoint in `output_dir`, with its step, optimizer state and data position; a
    finished run is not trained again (raise `schedule.train_steps` to train further).
    With `config.init_from`, a new run starts from the weights and vocabulary of another run
    (fine-tuning: a fresh optimizer at step 0); once it has checkpoints it resumes from them.

    Args:
        config: a `TrainingConfig`, its dict, or the path of a YAML/JSON file.
        callbacks: extra Keras callbacks for `fit`.

    Returns:
        A `TrainingResult`.

    Raises:
        UserInputError: for a bad config, missing files or an unwritable output folder,
            before any training.
        TrainingDivergedError: when the loss becomes NaN (the last good checkpoint is kept).

    Example:
        >>> result = train("configs/multi30k.yaml")  # doctest: +SKIP
        >>> result.output_dir.translation_model  # doctest: +SKIP
        'runs/multi30k_en_de/averaged.keras'
    """
    config = load_training_config(config)
    config.check_paths()
    config, init = finetune.resolve_init(config)
    if config.strategy == "multi_worker" and config.data.vocab is None:
        raise UserInputError(
            "data.vocab: strategy 'multi_worker' needs an existing vocabulary so that every "
            "worker reads the same one; train it first with `keras-transformer vocab`"
        )
    run = OutputDir(config.output_dir)
    with _undone_on_failed_start(run) as start:
        return _train(config, run, start, callbacks, init)


@dataclasses.dataclass
class _Start:
    """How far a start got: `training` once the first update is under way (a failure before
    undoes the start), `chief` whether this process writes the run's files."""

    training: bool = False
    chief: bool = True


@contextlib.contextmanager
def _undone_on_failed_start(run):
    """Prepares the run folder, and undoes it when the start fails (an error before the first
    update: a misaligned corpus, a bad path found late): the folders this call made are removed,
    and so is every entry it added to an existing one, whose own files it has not changed
    (they are written only once training starts: `run_files.write_run_files`)."""
    existed = os.path.isdir(run.path)
    before = set(os.listdir(run.path)) if existed else set()
    made = os.path.abspath(run.path)  # the outermost folder this call makes
    while not os.path.exists(os.path.dirname(made)):
        made = os.path.dirname(made)
    run.prepare()
    start = _Start()
    try:
        yield start
    except BaseException:
        if not start.training and start.chief:
            if not existed:
                shutil.rmtree(made, ignore_errors=True)
            else:
                _remove_added(run.path, before)
        raise


def _remove_added(folder, before):
    for name in set(os.listdir(folder)) - before:
        path = os.path.join(folder, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.remove(path)


@dataclasses.dataclass
class _Session:
    """One start of a run, as `_fit` needs it: what was built and restored."""

    config: TrainingConfig
    run: OutputDir
    strategy: object
    vocabulary: object
    model: TrainingModel
    checkpointer: Checkpointer
    start_step: int
    accumulation_steps: int
    chief: bool
    train_seconds: keras.Variable
    begin_training: Callable[[], None]


def _train(config, run, start, callbacks, init=None):
    # The strategy comes before any TensorFlow op: logical CPU devices must be set first.
    strategy = make_strategy(config.strategy, config.num_devices)
    chief = start.chief = is_chief(strategy)
    # Outside the strategy scope: one host variable, written by a callback between updates.
    train_seconds = keras.Variable(0.0, dtype="float64", trainable=False, name="train_seconds")

    vocabulary = inputs.prepare_vocabulary(config, run, chief, init)
    if isinstance(vocabulary, MarianVocabulary):  # an imported model, or a run tuning one
        source = init["model_config"] if init else run
        model_config = finetune.imported_model_config(config, source)
    else:
        model_config = config.transformer_config(vocab_size=vocabulary.size)
    run_files.check_run_model(model_config, run)
    if init is not None:
        finetune.check_init_model(model_config, init)

    def begin_training():
        # Written once the start has succeeded: a failed start leaves the run's files alone.
        if chief:
            run_files.write_run_files(config, model_config, run)
            if init is not None:
                run_files.write_init_record(run, init)
        start.training = True

    if config.seed is not None:
        keras.utils.set_random_seed(config.seed)
    with strategy.scope():
        transformer, model, checkpointer = _build(config, model_config, run, chief, train_seconds)
        start_step = checkpointer.restore_latest()
        if init is not None and checkpointer.restored_path is None:
            finetune.initialize_from(transformer, init)
    session = _Session(
        config=config,
        run=run,
        strategy=strategy,
        vocabulary=vocabulary,
        model=model,
        checkpointer=checkpointer,
        start_step=start_step,
        accumulation_steps=config.accumulation_steps(strategy.num_replicas_in_sync),
        chief=chief,
        train_seconds=train_seconds,
        begin_training=begin_training,
    )
    finished_before = _finished_before(session)
    history = {}
    if finished_before:
        begin_training()
    else:
        history = _fit(session, callbacks)
    step = int(read_value(model.optimizer.iterations))
    stopped_by_time = step < config.schedule.train_steps and _out_of_time(session)
    if stopped_by_time:
        logger.info(
            "stopped at step %d of %d: schedule.max_train_minutes (%g) is spent "
            "(raise it to train on)",
            step,
            config.schedule.train_steps,
            config.schedule.max_train_minutes,
        )
    averaged = _save_models(session, transformer, model_config, finished_before)
    return TrainingResult(
        output_dir=run,
        step=step,
        resumed_from_step=start_step,
        accumulation_steps=session.accumulation_steps,
        num_replicas=strategy.num_replicas_in_sync,
        final_model=run.final_model,
        averaged_model=averaged,
        history=history,
        model=transformer,
        train_seconds=float(read_value(train_seconds)),
        stopped_by_time=stopped_by_time,
        initialized_from=None if init is None else init["file"],
    )


def _build(config, model_config, run, chief, train_seconds):
    """The Transformer, its `TrainingModel` (compiled, optimizer built) and the `Checkpointer`
    of the run; under the strategy's scope."""
    max_minutes = config.schedule.max_train_minutes
    policy = None if config.precision == "float32" else config.precision
    transformer = build_model(model_config, dtype=policy)
    optimizer = build_optimizer(
        model_config.d_model,
        config.schedule.warmup_steps,
        config.schedule.learning_rate_scale,
        config.schedule.decay,
        config.schedule.train_steps,
        time_budget=None if max_minutes is None else max_minutes * 60.0,
        elapsed=train_seconds,
    )
    if config.precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    model = TrainingModel(transformer)
    model.compile(optimizer=optimizer, jit_compile=config.xla)
    optimizer.build(transformer.trainable_variables)
    checkpointer = Checkpointer(
        run.checkpoint_dir,
        transformer,
        optimizer,
        counters={
            "tokens_seen": model.tokens_seen,
            "loss_seen": model.loss_seen,
            "micro_batches_seen": model.micro_batches_seen,
            "train_seconds": train_seconds,
        },
        keep_last=config.checkpoints.keep_last,
        write=chief,
    )
    return transformer, model, checkpointer


def _out_of_time(session):
    max_minutes = session.config.schedule.max_train_minutes
    return max_minutes is not None and float(read_value(session.train_seconds)) >= max_minutes * 60


def _finished_before(session):
    """Whether the run had finished before this start (the steps or the time are spent)."""
    start_step, train_steps = session.start_step, session.config.schedule.train_steps
    if start_step:
        logger.info(
            "resuming %s from step %d (%s)",
            session.run.path,
            start_step,
            session.checkpointer.latest,
        )
    if start_step >= train_steps:
        logger.warning(
            "%s has trained %d steps already and schedule.train_steps is %d: nothing "
            "to train (raise schedule.train_steps to train on)",
            session.run.path,
            start_step,
            train_steps,
        )
    return start_step >= train_steps or _out_of_time(session)


def _save_models(session, transformer, model_config, finished_before):
    """Saves model.keras and averaged.keras (on the chief); returns the averaged model's path,
    or None."""
    run = session.run
    if not session.chief:
        return None
    if not (finished_before and os.path.exists(run.final_model)):
        atomic_save_model(transformer, run.final_model)
    if finished_before and os.path.exists(run.averaged_model):
        return run.averaged_model
    return _average(session.config, run, model_config)


def _fit(session, extra_callbacks):
    config, model = session.config, session.model
    num_replicas = session.strategy.num_replicas_in_sync
    train_data, feed_callbacks = inputs.training_batches(
        config,
        session.vocabulary,
        session.strategy,
        model,
        session.checkpointer,
        session.accumulation_steps,
    )
    dev_data = inputs.dev_batches(config, session.vocabulary, num_replicas)
    train_steps, start_step = config.schedule.train_steps, session.start_step
    steps_per_epoch = min(config.schedule.eval_every_steps, train_steps)
    initial_epoch = start_step // steps_per_epoch
    epochs = initial_epoch + -(-(train_steps - start_step) // steps_per_epoch)
    callbacks = [*feed_callbacks, *_callbacks(session), *(extra_callbacks or [])]
    logger.info(
        "training %s: %d replica(s), %d micro-batch(es) of %d tokens per replica per "
        "update, steps %d -> %d",
        session.run.path,
        num_replicas,
        session.accumulation_steps,
        config.data.token_budget,
        start_step,
        train_steps,
    )
    session.begin_training()
    started = time.monotonic()
    fit_history = model.fit(
        train_data,
        epochs=epochs,
        initial_epoch=initial_epoch,
        steps_per_epoch=steps_per_epoch,
        validation_data=dev_data,
        callbacks=callbacks,
        verbose=config.verbose if session.chief else 0,
        shuffle=False,
    )
    logger.info(
        "trained %d steps in %.0f s",
        int(read_value(model.optimizer.iterations)) - start_step,
        time.monotonic() - started,
    )
    return fit_history.history


def _callbacks(session):
    """The run's own callbacks, in order: the clock first (the checkpoint callback after it
    saves the time up to this update), the stops, dev BLEU, the checkpoints, the logs."""
    config, run, checkpointer = session.config, session.run, session.checkpointer
    schedule = config.schedule
    callbacks = [
        StopAfterMinutes(schedule.max_train_minutes, session.train_seconds),
        NaNGuard(last_checkpoint=lambda: checkpointer.latest),
        StopAtStep(schedule.train_steps),
    ]
    if config.dev_bleu.sentences:
        # Before the checkpoint callback: a checkpoint of step S comes after the score of S,
        # so a resume from it never misses that score (dev_bleu.json keeps it).
        callbacks.append(_dev_bleu_callback(config, run, session.chief))
    callbacks.append(
        CheckpointCallback(
            checkpointer, config.checkpoints.every_minutes, config.checkpoints.every_steps
        )
    )
    if session.chief:
        callbacks.append(TrainingLogger(run.log_dir, run.history, schedule.log_every_steps))
    return callbacks


def _dev_bleu_callback(config, run, chief):
    settings = config.dev_bleu
    sources, references = inputs.dev_sentences(config)
    return DevBleu(
        sources,
        references,
        # An imported model's vocabulary is several files: the run folder designates them.
        run.path if is_marian_folder(run.path) else run.vocabulary,
        beam_size=settings.beam_size,
        alpha=settings.alpha,
        patience=settings.patience,
        best_model_path=run.best_model if settings.keep_best else None,
        best_record_path=run.best_record if settings.keep_best else None,
        history_path=run.dev_bleu_history,
        every_steps=min(config.schedule.eval_every_steps, config.schedule.train_steps),
        write=chief,
    )


def _average(config, run, model_config):
    last = config.checkpoints.average_last
    if last <= 0:
        return None
    available = list_checkpoints(run.checkpoint_dir)
    if not available:
        return None
    chosen = available[-last:]
    fraction = config.checkpoints.average_last_fraction
    if fraction is not None:
        chosen = in_last_fraction(chosen, fraction)
        logger.info(
            "averaging the %d checkpoint(s) of the last %g of the updates", len(chosen), fraction
        )
    elif len(available) < last:
        logger.warning(
            "averaging the %d checkpoints there are instead of the last %d", len(available), last
        )
    averaged = average_checkpoints(chosen, config=model_config)
    atomic_save_model(averaged, run.averaged_model)
    return run.averaged_model
