"""`train(config)`: the training entry point of the library, the CLI and the pipelines.

One call runs a whole paper recipe (section 5): check the config, pick the strategy, prepare
the vocabulary and the run folder, build the model, optimizer and token-budget batches,
restore the newest checkpoint if the run was interrupted, `model.fit` to `train_steps`, then
save the final model and the average of the last checkpoints (6.1).
"""

import contextlib
import dataclasses
import filecmp
import json
import logging
import os
import shutil
import time
import types

import keras
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.errors import UserInputError
from keras_transformer.model import build_model
from keras_transformer.schedules import build_optimizer
from keras_transformer.training.accumulation import group_micro_batches
from keras_transformer.training.averaging import average_checkpoints, in_last_fraction
from keras_transformer.training.callbacks import (
    NaNGuard,
    StopAfterMinutes,
    StopAtStep,
    TrainingLogger,
)
from keras_transformer.training.checkpoints import (
    CheckpointCallback,
    Checkpointer,
    has_data_feed,
    has_data_iterator,
    list_checkpoints,
)
from keras_transformer.training.config import TrainingConfig
from keras_transformer.training.distributed_feed import CheckpointableFeed
from keras_transformer.training.output_dir import OutputDir, atomic_save_model, atomic_write
from keras_transformer.training.strategies import is_chief, make_strategy
from keras_transformer.training.training_model import TrainingModel, read_value

logger = logging.getLogger(__name__)

# Fields that change how the model trains, not what its weights are: a run goes on under new
# values (as OpenNMT-tf and fairseq let dropout change on a resume), e.g. when a recipe's
# default changes between two starts of the same command.
TRAINING_ONLY_FIELDS = ("dropout", "attention_dropout", "relu_dropout", "label_smoothing")


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
    config, init = _resolve_init(config)
    if config.strategy == "multi_worker" and config.data.vocab is None:
        raise UserInputError(
            "data.vocab: strategy 'multi_worker' needs an existing vocabulary so that every "
            "worker reads the same one; train it first with `keras-transformer vocab`"
        )
    run = OutputDir(config.output_dir)
    with _undone_on_failed_start(run) as start:
        return _train(config, run, start, callbacks, init)


@contextlib.contextmanager
def _undone_on_failed_start(run):
    """Prepares the run folder, and undoes it when the start fails (an error before the first
    update: a misaligned corpus, a bad path found late): the folders this call made are removed,
    and so is every entry it added to an existing one, whose own files it has not changed
    (they are written only once training starts: `_write_run_files`)."""
    existed = os.path.isdir(run.path)
    before = set(os.listdir(run.path)) if existed else set()
    made = os.path.abspath(run.path)  # the outermost folder this call makes
    while not os.path.exists(os.path.dirname(made)):
        made = os.path.dirname(made)
    run.prepare()
    start = types.SimpleNamespace(training=False, chief=True)
    try:
        yield start
    except BaseException:
        if not start.training and start.chief:
            if not existed:
                shutil.rmtree(made, ignore_errors=True)
            else:
                for name in set(os.listdir(run.path)) - before:
                    path = os.path.join(run.path, name)
                    if os.path.isdir(path) and not os.path.islink(path):
                        shutil.rmtree(path, ignore_errors=True)
                    else:
                        with contextlib.suppress(OSError):
                            os.remove(path)
        raise


def _train(config, run, start, callbacks, init=None):
    # The strategy comes before any TensorFlow op: logical CPU devices must be set first.
    strategy = make_strategy(config.strategy, config.num_devices)
    chief = start.chief = is_chief(strategy)
    # Outside the strategy scope: one host variable, written by a callback between updates.
    train_seconds = keras.Variable(0.0, dtype="float64", trainable=False, name="train_seconds")

    vocabulary = _prepare_vocabulary(config, run, chief)
    model_config = config.transformer_config(vocab_size=vocabulary.size)
    _check_run_model(model_config, run)
    if init is not None:
        _check_init_model(model_config, init)

    def begin_training():
        # Written once the start has succeeded: a failed start leaves the run's files alone.
        if chief:
            _write_run_files(config, model_config, run)
            if init is not None:
                with atomic_write(run.init_record) as file:
                    json.dump({k: init[k] for k in ("run", "file", "kind", "step")}, file)
        start.training = True

    num_replicas = strategy.num_replicas_in_sync
    accumulation_steps = config.accumulation_steps(num_replicas)
    if config.seed is not None:
        keras.utils.set_random_seed(config.seed)
    max_seconds = (
        None
        if config.schedule.max_train_minutes is None
        else config.schedule.max_train_minutes * 60.0
    )
    with strategy.scope():
        policy = None if config.precision == "float32" else config.precision
        transformer = build_model(model_config, dtype=policy)
        optimizer = build_optimizer(
            model_config.d_model,
            config.schedule.warmup_steps,
            config.schedule.learning_rate_scale,
            config.schedule.decay,
            config.schedule.train_steps,
            time_budget=max_seconds,
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
        start_step = checkpointer.restore_latest()
        if init is not None and checkpointer.restored_path is None:
            _initialize_from(transformer, init)

    train_steps = config.schedule.train_steps
    max_minutes = config.schedule.max_train_minutes

    def out_of_time():
        return max_minutes is not None and float(read_value(train_seconds)) >= max_minutes * 60

    if start_step:
        logger.info("resuming %s from step %d (%s)", run.path, start_step, checkpointer.latest)
    finished_before = start_step >= train_steps or out_of_time()
    if start_step >= train_steps:
        logger.warning(
            "%s has trained %d steps already and schedule.train_steps is %d: nothing "
            "to train (raise schedule.train_steps to train on)",
            run.path,
            start_step,
            train_steps,
        )
    history = {}
    if finished_before:
        begin_training()
    else:
        history = _fit(
            config,
            model,
            strategy,
            vocabulary,
            checkpointer,
            run,
            start_step,
            accumulation_steps,
            chief,
            callbacks,
            train_seconds,
            begin_training,
        )
    step = int(read_value(optimizer.iterations))
    stopped_by_time = step < train_steps and out_of_time()
    if stopped_by_time:
        logger.info(
            "stopped at step %d of %d: schedule.max_train_minutes (%g) is spent "
            "(raise it to train on)",
            step,
            train_steps,
            max_minutes,
        )

    averaged = None
    if chief:
        if not (finished_before and os.path.exists(run.final_model)):
            atomic_save_model(transformer, run.final_model)
        if finished_before and os.path.exists(run.averaged_model):
            averaged = run.averaged_model
        else:
            averaged = _average(config, run, model_config)
    return TrainingResult(
        output_dir=run,
        step=step,
        resumed_from_step=start_step,
        accumulation_steps=accumulation_steps,
        num_replicas=num_replicas,
        final_model=run.final_model,
        averaged_model=averaged,
        history=history,
        model=transformer,
        train_seconds=float(read_value(train_seconds)),
        stopped_by_time=stopped_by_time,
        initialized_from=None if init is None else init["file"],
    )


def _fit(
    config,
    model,
    strategy,
    vocabulary,
    checkpointer,
    run,
    start_step,
    accumulation_steps,
    chief,
    extra_callbacks,
    train_seconds,
    begin_training,
):
    from keras_transformer import data

    settings = config.data
    num_replicas = strategy.num_replicas_in_sync
    pipeline = data.TranslationPipeline(
        _corpora(settings.train),
        vocabulary,
        token_budget=settings.token_budget,
        max_length=settings.max_length,
        num_replicas=num_replicas,
        shuffle_buffer=settings.shuffle_buffer,
        cache_dir=settings.cache_dir,
        pad_to_bucket_boundary=settings.pad_to_bucket_boundary,
    )
    batches = pipeline.dataset(seed=settings.seed, shuffle=True, repeat=True)
    # Data position. Without a distribution strategy the data iterator itself is saved in
    # every checkpoint and restored into the iterator `fit` makes. Under a strategy on one
    # host (whose own iterators cannot be checkpointed) a `CheckpointableFeed` reads the
    # batches with a host iterator that checkpoints hold. Either way a restart costs what
    # reading one checkpoint costs. Across workers, or from a checkpoint without the
    # iterator, the same seed replays the same batches, so skipping the micro-batches
    # already trained on resumes exactly where the checkpoint was written, at the cost of
    # re-reading them.
    consumed = int(read_value(model.micro_batches_seen))
    restored = checkpointer.restored_path
    mode = _data_position_mode(strategy, consumed, restored)
    if mode == "iterator":
        model.on_train_iterator = lambda iterator: _attach_iterator(checkpointer, iterator)
    elif mode == "replay" and consumed:
        logger.info("skipping the %d micro-batches trained on before (data position)", consumed)
        batches = batches.skip(consumed)
    train_data = group_micro_batches(batches, accumulation_steps).prefetch(tf.data.AUTOTUNE)
    feed_callbacks = []
    if mode == "feed":
        feed = CheckpointableFeed(train_data)
        _attach_iterator(checkpointer, feed.trackable, on_restore=feed.restore_pending)
        checkpointer.save_guard = feed.saving
        train_data = feed.dataset()
        feed_callbacks.append(feed.callback())  # before the checkpoint callback

    dev_data = None
    if settings.dev is not None:
        # One global budget for all replicas, split by tf.distribute as evenly as it can:
        # the dev set is read once, so its batches need not divide by the replica count.
        dev_pipeline = data.TranslationPipeline(
            _corpora([settings.dev]),
            vocabulary,
            token_budget=settings.token_budget * num_replicas,
            max_length=settings.max_length,
            num_replicas=1,
            shuffle_buffer=1,
        )
        dev_data = dev_pipeline.dataset(shuffle=False, repeat=False)
        # A known length keeps Keras from warning that the dev set "ran out of data".
        dev_batches = int(dev_data.reduce(0, lambda count, _: count + 1).numpy())
        dev_data = dev_data.apply(tf.data.experimental.assert_cardinality(dev_batches))

    schedule = config.schedule
    train_steps = schedule.train_steps
    steps_per_epoch = min(schedule.eval_every_steps, train_steps)
    initial_epoch = start_step // steps_per_epoch
    epochs = initial_epoch + -(-(train_steps - start_step) // steps_per_epoch)

    # The clock first: the checkpoint callback after it saves the time up to this update.
    callbacks = [
        *feed_callbacks,
        StopAfterMinutes(schedule.max_train_minutes, train_seconds),
        NaNGuard(last_checkpoint=lambda: checkpointer.latest),
        StopAtStep(train_steps),
    ]
    if config.dev_bleu.sentences:
        # Before the checkpoint callback: a checkpoint of step S comes after the score of S,
        # so a resume from it never misses that score (dev_bleu.json keeps it).
        callbacks.append(_dev_bleu_callback(config, run, chief))
    callbacks.append(
        CheckpointCallback(
            checkpointer, config.checkpoints.every_minutes, config.checkpoints.every_steps
        )
    )
    if chief:
        callbacks.append(TrainingLogger(run.log_dir, run.history, schedule.log_every_steps))
    callbacks.extend(extra_callbacks or [])
    verbose = config.verbose if chief else 0
    logger.info(
        "training %s: %d replica(s), %d micro-batch(es) of %d tokens per replica per "
        "update, steps %d -> %d",
        run.path,
        num_replicas,
        accumulation_steps,
        settings.token_budget,
        start_step,
        train_steps,
    )
    begin_training()
    started = time.monotonic()
    fit_history = model.fit(
        train_data,
        epochs=epochs,
        initial_epoch=initial_epoch,
        steps_per_epoch=steps_per_epoch,
        validation_data=dev_data,
        callbacks=callbacks,
        verbose=verbose,
        shuffle=False,
    )
    logger.info(
        "trained %d steps in %.0f s",
        int(read_value(model.optimizer.iterations)) - start_step,
        time.monotonic() - started,
    )
    return fit_history.history


def _data_position_mode(strategy, consumed, restored):
    """How this start keeps the data position (see `_fit`): "iterator" (fit's own, under the
    default strategy), "feed" (a `CheckpointableFeed`, under a strategy on one host) or
    "replay" (across workers, or from a checkpoint written without either)."""
    default = strategy is tf.distribute.get_strategy() and not tf.distribute.has_strategy()
    # tf.distribute's iterators have no checkpoint support; a multi-worker run's workers each
    # read their own share of the data, which one host iterator cannot give them.
    feedable = not default and not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
    if consumed and restored is not None:
        if default and has_data_iterator(restored) and not has_data_feed(restored):
            return "iterator"
        if feedable and has_data_feed(restored):
            return "feed"
        return "replay"
    return "iterator" if default else "feed" if feedable else "replay"


def _attach_iterator(checkpointer, iterator, on_restore=None):
    if not isinstance(iterator, (tf.data.Iterator, tf.train.Checkpoint)):
        return
    started = time.monotonic()
    try:
        restored = checkpointer.attach_data_iterator(iterator)
    except tf.errors.OpError as error:
        raise UserInputError(
            f"the data position saved in {checkpointer.restored_path} does not fit this "
            f"run's data settings ({type(error).__name__}: {str(error).splitlines()[0][:200]});"
            " the data section of the config changed since it was written: restore it, or "
            "use a new output_dir"
        ) from None
    if restored:
        if on_restore is not None:
            on_restore()
        logger.info(
            "restored the data position from %s in %.1f s",
            checkpointer.restored_path,
            time.monotonic() - started,
        )


def _dev_bleu_callback(config, run, chief):
    from keras_transformer.data import read_lines
    from keras_transformer.training.dev_bleu import DevBleu

    settings, dev = config.dev_bleu, config.data.dev
    sources, references = [], []
    for source, reference in zip(read_lines(dev.source), read_lines(dev.target)):
        if len(sources) == settings.sentences:
            break
        sources.append(source.decode("utf-8", errors="replace"))
        references.append(reference.decode("utf-8", errors="replace"))
    return DevBleu(
        sources,
        references,
        run.vocabulary,
        beam_size=settings.beam_size,
        alpha=settings.alpha,
        patience=settings.patience,
        best_model_path=run.best_model if settings.keep_best else None,
        best_record_path=run.best_record if settings.keep_best else None,
        history_path=run.dev_bleu_history,
        every_steps=min(config.schedule.eval_every_steps, config.schedule.train_steps),
        write=chief,
    )


def _corpora(files):
    from keras_transformer import data

    corpora = []
    for corpus in files:
        if corpus.tfds is not None:
            corpora.append(
                data.TfdsCorpus(
                    corpus.tfds,
                    corpus.source,
                    corpus.target,
                    split=corpus.split,
                    weight=corpus.weight,
                )
            )
        else:
            corpora.append(
                data.TextPairCorpus(
                    corpus.source,
                    corpus.target,
                    weight=corpus.weight,
                    on_bad_line=corpus.on_bad_line,
                )
            )
    return corpora


def _prepare_vocabulary(config, run, chief):
    """The run's vocabulary: the given `.model` (copied into the run), the run's own from an
    earlier start, or one trained now on the training corpora."""
    from keras_transformer import data

    settings = config.data
    if settings.vocab is not None:
        if chief:
            if not os.path.exists(run.vocabulary):
                shutil.copyfile(settings.vocab, run.vocabulary + ".tmp")
                os.replace(run.vocabulary + ".tmp", run.vocabulary)
            elif not filecmp.cmp(settings.vocab, run.vocabulary, shallow=False):
                raise UserInputError(
                    f"data.vocab {settings.vocab!r} differs from {run.vocabulary!r}, the "
                    "vocabulary this run was started with; use that one, or a new output_dir"
                )
        return data.SubwordVocabulary.from_file(settings.vocab)
    if os.path.exists(run.vocabulary):
        return data.SubwordVocabulary.from_file(run.vocabulary)
    prefix = os.path.join(run.path, ".vocab-training")
    logger.info(
        "training a %d-piece %s vocabulary into %s",
        settings.vocab_size,
        settings.vocab_model_type,
        run.vocabulary,
    )
    data.train_vocabulary(
        _corpora(settings.train),
        prefix,
        vocab_size=settings.vocab_size,
        model_type=settings.vocab_model_type,
        seed=settings.seed,
    )
    os.replace(prefix + ".vocab", os.path.splitext(run.vocabulary)[0] + ".vocab")
    os.replace(prefix + ".model", run.vocabulary)
    return data.SubwordVocabulary.from_file(run.vocabulary)


def _resolve_init(config):
    """`config` ready to fine-tune from `config.init_from` (its `data.vocab` set to that run's
    vocabulary), and what to start from: `{run, file, kind, step}` (None: no `init_from`, or
    the run resumes from checkpoints of its own).

    Raises:
        UserInputError: when `init_from` is not a trained run folder, has no weights, or the
            config names a vocabulary of other pieces.
    """
    if config.init_from is None:
        return config, None
    source, key = OutputDir(config.init_from), "init_from"
    if list_checkpoints(OutputDir(config.output_dir).checkpoint_dir):
        logger.info(
            "%s has checkpoints of its own: resuming from them, not from %s",
            config.output_dir,
            source.path,
        )
        # The same data.vocab as the first start, so that training_config.json stays the same.
        if config.data.vocab is None and os.path.isfile(source.vocabulary):
            config = config.replace(data=dataclasses.replace(config.data, vocab=source.vocabulary))
        return config, None
    if not os.path.isdir(source.path):
        raise UserInputError(
            f"{key} {source.path!r} is not a folder; give the output_dir of a trained run"
        )
    for path in (source.model_config, source.vocabulary):
        if not os.path.isfile(path):
            raise UserInputError(
                f"{key} {source.path!r} is not a training run folder: it has no "
                f"{os.path.basename(path)}; give the output_dir of a trained run"
            )
    init = _init_weights(source)
    if config.data.vocab is not None and not filecmp.cmp(
        config.data.vocab, source.vocabulary, shallow=False
    ):
        _check_same_pieces(config.data.vocab, source.vocabulary)
    return config.replace(data=dataclasses.replace(config.data, vocab=source.vocabulary)), init


def _init_weights(source):
    """The weights a fine-tuned run starts from: the run's averaged model, else its final
    model, else its newest checkpoint."""
    checkpoints = (
        list_checkpoints(source.checkpoint_dir) if os.path.isdir(source.checkpoint_dir) else []
    )
    newest_step = int(checkpoints[-1].rsplit("-", 1)[1]) if checkpoints else None
    models = [("averaged", source.averaged_model), ("final", source.final_model)]
    found = [(kind, path) for kind, path in models if os.path.isfile(path)]
    if not found and not checkpoints:
        raise UserInputError(
            f"init_from {source.path!r} holds no weights (no averaged.keras, model.keras or "
            "checkpoint); train it first, or give another run"
        )
    kind, path = found[0] if found else ("checkpoint", checkpoints[-1])
    # The step of the newest checkpoint: the one the run's final (or averaged) model ends at.
    return {
        "run": os.path.abspath(source.path),
        "file": os.path.abspath(path),
        "kind": kind,
        "step": newest_step,
        "model_config": source.model_config,
    }


def _check_same_pieces(vocab, source_vocab):
    from keras_transformer import data

    def pieces(path):
        processor = data.SubwordVocabulary.from_file(path).processor
        return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]

    if pieces(vocab) != pieces(source_vocab):
        raise UserInputError(
            f"data.vocab {vocab!r} has other pieces than {source_vocab!r}, the vocabulary "
            "of init_from: a fine-tuned model keeps the ids it was trained with; remove "
            "data.vocab (the run's own vocabulary is used) or start from another run"
        )


def _check_init_model(model_config, init):
    """Raises `UserInputError` naming every model field that gives weights other than those
    of `init_from` (dropout and label smoothing may change)."""
    with open(init["model_config"], encoding="utf-8") as file:
        existing = TransformerConfig.from_dict(json.load(file)).to_dict()
    free = set(TRAINING_ONLY_FIELDS)
    if existing.get("positional") == model_config.positional == "sinusoidal":
        free.add("max_length")  # a sinusoidal table is computed, not a weight
    new = model_config.to_dict()
    changed = [
        f"{k}: {existing.get(k)!r} in init_from, {v!r} in this config"
        for k, v in new.items()
        if k not in free and existing.get(k) != v
    ]
    if changed:
        raise UserInputError(
            f"init_from {init['run']!r} is another model than this config's: "
            + "; ".join(changed)
            + ". Set the model section as in that run's config.json to fine-tune it"
        )


def _initialize_from(transformer, init):
    """Gives `transformer` the weights of `init["file"]`: weights only, by Keras path."""
    from keras_transformer.training.checkpoints import model_variables
    from keras_transformer.training.output_dir import load_model

    logger.info(
        "starting from the weights of %s (%s model of %s, step %s): a fresh optimizer, "
        "step 0, this config's schedule and data",
        init["file"],
        init["kind"],
        init["run"],
        init["step"],
    )
    if init["kind"] == "checkpoint":
        tf.train.Checkpoint(model=model_variables(transformer)).read(
            init["file"]
        ).assert_existing_objects_matched().expect_partial()
        return
    loaded, _ = load_model(init["file"])
    weights = {variable.path: variable for variable in loaded.weights}
    missing = [v.path for v in transformer.weights if v.path not in weights]
    if missing:
        raise UserInputError(
            f"{init['file']} does not hold the weights of this model (missing {missing[:3]}); "
            "fine-tune from a run of the same model config"
        )
    for variable in transformer.weights:
        variable.assign(weights[variable.path])


def _changed_model_fields(model_config, run):
    """The fields of `model_config` that differ from the run's config.json (with the existing
    values), or None when there is no config.json yet.

    Raises:
        UserInputError: when the run holds another model (fields beyond
            `TRAINING_ONLY_FIELDS` differ).
    """
    if not os.path.exists(run.model_config):
        return None
    with open(run.model_config, encoding="utf-8") as file:
        existing = TransformerConfig.from_dict(json.load(file)).to_dict()
    changed = sorted(k for k, v in model_config.to_dict().items() if existing.get(k) != v)
    if set(changed) - set(TRAINING_ONLY_FIELDS):
        raise UserInputError(
            f"output_dir {run.path!r} holds a run of another model (fields {changed} "
            "differ from its config.json); use a new output_dir to train this model"
        )
    return changed, existing


def _check_run_model(model_config, run):
    """Raises `UserInputError` when the run folder holds another model, before anything is
    built or restored."""
    _changed_model_fields(model_config, run)


def _write_run_files(config, model_config, run):
    """Writes config.json and training_config.json; never overwrites a different model's
    (one that differs in more than `TRAINING_ONLY_FIELDS`), and keeps earlier versions."""
    found = _changed_model_fields(model_config, run)
    if found is not None:
        changed, existing = found
        if changed:
            kept = _keep_previous(run.model_config)
            logger.warning(
                "%s goes on with %s (before: %s; kept in %s)",
                run.path,
                {k: getattr(model_config, k) for k in changed},
                {k: existing.get(k) for k in changed},
                kept,
            )
            with atomic_write(run.model_config) as file:
                file.write(model_config.to_json())
    else:
        with atomic_write(run.model_config) as file:
            file.write(model_config.to_json())
    text = config.to_json()
    if os.path.exists(run.training_config):
        with open(run.training_config, encoding="utf-8") as file:
            previous = file.read()
        if previous == text:
            return
        # Keep the settings of earlier starts (e.g. before train_steps was raised).
        _keep_previous(run.training_config)
    with atomic_write(run.training_config) as file:
        file.write(text)


def _keep_previous(path):
    """Copies a run file aside as NAME.<time stamp>.json; returns the copy's path.

    A copy, not a move: `path` stays in place until its successor is renamed onto it, so a
    start killed in between leaves the run with its old file, not without one.
    """
    stem = f"{path[:-5]}.{time.strftime('%Y%m%d-%H%M%S')}"
    kept, number = f"{stem}.json", 1
    while os.path.exists(kept):  # two starts in one second: the copy would overwrite
        number += 1
        kept = f"{stem}-{number}.json"
    with open(path, "rb") as source, atomic_write(kept, "wb") as copy:
        shutil.copyfileobj(source, copy)
    return kept


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
