"""The layout of a training run's output folder: the one place that defines it.

Training writes, and translation, evaluation, export and averaging read:

    OUTPUT_DIR/
      config.json            the model's `TransformerConfig` (`TransformerConfig.from_json`)
      vocab.model            the shared SentencePiece vocabulary (`SubwordVocabulary.from_file`)
      training_config.json   the `TrainingConfig` the run was started with (for the record)
      checkpoints/           `tf.train.Checkpoint`s `ckpt-STEP.index` / `ckpt-STEP.data-*` of
                             model weights, optimizer state and progress (step, tokens), and
                             TensorFlow's `checkpoint` state file naming the newest ones
      logs/train, logs/dev   TensorBoard event files (loss, learning rate, tokens/s, dev loss
                             and perplexity)
      model.keras            the model at the last training step (`keras.saving.load_model`)
      averaged.keras         the weights of the last N checkpoints averaged (paper 6.1)
      best.keras, best.json  the model with the best dev BLEU so far, and its step and BLEU
                             (only with `dev_bleu.sentences` > 0)
      dev_bleu.json          the step and dev BLEU of every evaluation: early stopping's
                             patience counter after a resume (with `dev_bleu.sentences` > 0)
      init.json              where a fine-tuned run started from (`init_from`): run, file, step
      history.json           per-evaluation metrics, appended as training goes

`OutputDir(path).translation_model` is the file decoding should load: `averaged.keras` when
it exists, else `model.keras`; `find_model_files` and `load_model` find and load it (or the
newest checkpoint, or a `.keras` file given directly) for translation, evaluation and export.
A `.keras` file saved into a run folder (`atomic_save_model`) carries the run's `vocab.model`
inside it (`Transformer.tokenizer`), so it translates on its own when copied elsewhere. Every
file is written under a temporary name and renamed into place (`atomic_write`), so a run
killed at any moment leaves each file either complete or absent, never half-written.

Example:
    >>> run = OutputDir("runs/multi30k")
    >>> run.checkpoint_dir
    'runs/multi30k/checkpoints'
"""

import contextlib
import os
import tempfile

from keras_transformer.errors import UserInputError

CONFIG_FILE = "config.json"
VOCAB_FILE = "vocab.model"
TRAINING_CONFIG_FILE = "training_config.json"
CHECKPOINT_DIR = "checkpoints"
LOG_DIR = "logs"
FINAL_MODEL_FILE = "model.keras"
AVERAGED_MODEL_FILE = "averaged.keras"
HISTORY_FILE = "history.json"
BEST_MODEL_FILE = "best.keras"
BEST_RECORD_FILE = "best.json"
DEV_BLEU_HISTORY_FILE = "dev_bleu.json"
INIT_RECORD_FILE = "init.json"


class OutputDir:
    """Paths inside one training run's output folder (see the module docstring).

    Args:
        path: the run folder (`TrainingConfig.output_dir`).

    Example:
        >>> OutputDir("runs/ende").model_config
        'runs/ende/config.json'
    """

    def __init__(self, path):
        self.path = os.fspath(path)

    def _join(self, name):
        return os.path.join(self.path, name)

    @property
    def model_config(self):
        """`config.json`: the `TransformerConfig` of the model."""
        return self._join(CONFIG_FILE)

    @property
    def vocabulary(self):
        """`vocab.model`: the SentencePiece vocabulary the model's ids come from."""
        return self._join(VOCAB_FILE)

    @property
    def training_config(self):
        """`training_config.json`: the `TrainingConfig` of the run."""
        return self._join(TRAINING_CONFIG_FILE)

    @property
    def checkpoint_dir(self):
        """`checkpoints/`: `tf.train.Checkpoint` files, named by training step."""
        return self._join(CHECKPOINT_DIR)

    @property
    def log_dir(self):
        """`logs/`: TensorBoard logs (`logs/train`, `logs/dev`)."""
        return self._join(LOG_DIR)

    @property
    def final_model(self):
        """`model.keras`: the model at the last training step."""
        return self._join(FINAL_MODEL_FILE)

    @property
    def averaged_model(self):
        """`averaged.keras`: the average of the last checkpoints (paper 6.1)."""
        return self._join(AVERAGED_MODEL_FILE)

    @property
    def best_model(self):
        """`best.keras`: the model with the best dev BLEU (when dev BLEU is on)."""
        return self._join(BEST_MODEL_FILE)

    @property
    def best_record(self):
        """`best.json`: step, BLEU and chrF of `best.keras`."""
        return self._join(BEST_RECORD_FILE)

    @property
    def dev_bleu_history(self):
        """`dev_bleu.json`: step, BLEU and chrF of every dev BLEU evaluation."""
        return self._join(DEV_BLEU_HISTORY_FILE)

    @property
    def init_record(self):
        """`init.json`: the run, file and step a fine-tuned run took its first weights from."""
        return self._join(INIT_RECORD_FILE)

    @property
    def history(self):
        """`history.json`: metrics of every evaluation."""
        return self._join(HISTORY_FILE)

    @property
    def translation_model(self):
        """The model file to translate with: averaged if there is one, else the final one."""
        if os.path.exists(self.averaged_model):
            return self.averaged_model
        return self.final_model

    def prepare(self):
        """Creates the folder (and `checkpoints/`) and checks that it is writable.

        Raises:
            UserInputError: when the folder cannot be created or written, before any training.
        """
        try:
            os.makedirs(self.checkpoint_dir, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.path, prefix=".write-test-"):
                pass
        except OSError as error:
            raise UserInputError(
                f"output_dir {self.path!r} is not writable ({error.strerror}); choose a folder "
                "you can write to, or fix its permissions"
            ) from None

    def __repr__(self):
        return f"OutputDir({self.path!r})"


def check_output_file(path, flag):
    """Raises `UserInputError` when `path` (given with `flag`) could not be written: its folder
    is under a file, or is not writable. Cheap: callers check before a long computation.
    Folders that do not exist yet are fine (they are created)."""
    folder = os.path.dirname(os.path.abspath(path))
    existing = folder
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UserInputError(
            f"{flag} {path!r}: {existing!r} is a file, not a folder; choose another {flag}"
        )
    if not os.access(existing, os.W_OK):
        raise UserInputError(
            f"{flag} {path!r}: the folder {existing!r} is not writable; choose another {flag}"
        )


def check_new_output_file(path, flag, overwrite):
    """`check_output_file`, and an existing file at `path` refused unless `overwrite`: a
    command's output never replaces an earlier file unasked. Cheap: callers check before a
    long computation."""
    check_output_file(path, flag)
    if os.path.isdir(path):
        raise UserInputError(f"{flag} {path!r} is a folder; give a file name")
    if os.path.exists(path) and not overwrite:
        raise UserInputError(
            f"{flag} {path!r} exists already; give --overwrite to replace it, or another {flag}"
        )


def _make_readable(path):
    # mkstemp creates files readable by the owner only; give the final file the usual mode.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


@contextlib.contextmanager
def _temporary_beside(path, suffix=""):
    """A temporary file name beside `path`, renamed onto `path` when the block succeeds and
    removed when it fails: a kill mid-write leaves the previous `path` untouched (the rename
    is atomic on POSIX file systems)."""
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(
        dir=directory, prefix=f".{os.path.basename(path)}.", suffix=suffix
    )
    os.close(handle)
    try:
        yield temporary
        _make_readable(temporary)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


@contextlib.contextmanager
def atomic_write(path, mode="w", encoding=None):
    """Opens a temporary file beside `path` and renames it onto `path` on success.

    A kill mid-write leaves the previous `path` (if any) untouched; a failed write removes the
    temporary file.

    Args:
        path: the final file.
        mode: "w" (text) or "wb" (bytes).
        encoding: of a text file (`open`'s default when None).

    Example:
        >>> with atomic_write("runs/x/config.json") as file:  # doctest: +SKIP
        ...     file.write("{}")
    """
    with _temporary_beside(path) as temporary, open(temporary, mode, encoding=encoding) as file:
        yield file
        file.flush()
        os.fsync(file.fileno())


def atomic_save_model(model, path):
    """Saves a Keras model to `path` (`.keras`) through a temporary file and a rename.

    A `Transformer` that carries no vocabulary yet, saved beside a `vocab.model` (into a run
    folder), is given that vocabulary first (`Transformer.tokenizer`): the file then holds the
    SentencePiece model and `Translator.load(path)` needs nothing beside it.
    """
    vocabulary = os.path.join(os.path.dirname(os.path.abspath(path)), VOCAB_FILE)
    if getattr(model, "tokenizer", False) is None and os.path.isfile(vocabulary):
        from keras_transformer.data.vocabulary import SubwordVocabulary

        model.tokenizer = SubwordVocabulary.from_file(vocabulary).to_tokenizer()
    with _temporary_beside(path, suffix=".keras") as temporary:
        model.save(temporary, overwrite=True)


# -- finding and loading a run's model -------------------------------------------------------


def find_model_files(path):
    """The model and vocabulary files that `path` designates.

    Args:
        path: a training run folder (its `translation_model`, else its newest checkpoint), a
            `.keras` file, or a checkpoint prefix `RUN/checkpoints/ckpt-STEP`.

    Returns:
        A dict with `kind` ("keras" or "checkpoint"), `model` (the file or prefix), `config`
        (the `config.json` a checkpoint needs, else None) and `vocabulary` (the `vocab.model`
        path, or None when there is none where the convention puts it).

    Raises:
        UserInputError: when `path` is none of these.

    Example:
        >>> find_model_files("runs/ende")["model"]  # doctest: +SKIP
        'runs/ende/averaged.keras'
    """
    path = os.fspath(path)

    def vocabulary_in(folder):
        candidate = os.path.join(folder, VOCAB_FILE)
        return candidate if os.path.isfile(candidate) else None

    if os.path.isdir(path):
        run = OutputDir(path)
        if os.path.isfile(run.translation_model):
            return {
                "kind": "keras",
                "model": run.translation_model,
                "config": None,
                "vocabulary": vocabulary_in(path),
            }
        checkpoints = _list_checkpoints(run.checkpoint_dir)
        if checkpoints:
            return {
                "kind": "checkpoint",
                "model": checkpoints[-1],
                "config": run.model_config,
                "vocabulary": vocabulary_in(path),
            }
        raise UserInputError(
            f"{path!r} holds no averaged.keras, model.keras nor checkpoints/: give a training "
            "output_dir, a .keras file or a checkpoint prefix such as RUN/checkpoints/ckpt-1000"
        )
    if path.endswith(".keras") and os.path.isfile(path):
        folder = os.path.dirname(os.path.abspath(path))
        return {"kind": "keras", "model": path, "config": None, "vocabulary": vocabulary_in(folder)}
    if os.path.isfile(path + ".index"):
        run_dir = os.path.dirname(os.path.dirname(os.path.abspath(path)))
        return {
            "kind": "checkpoint",
            "model": path,
            "config": OutputDir(run_dir).model_config,
            "vocabulary": vocabulary_in(run_dir),
        }
    raise UserInputError(
        f"cannot load a model from {path!r}: it is not a training output_dir, an existing "
        ".keras file nor a checkpoint prefix (RUN/checkpoints/ckpt-STEP with a .index file)"
    )


def _list_checkpoints(directory):
    if not os.path.isfile(os.path.join(directory, "checkpoint")):
        return []
    from keras_transformer.training.checkpoints import list_checkpoints

    return list_checkpoints(directory)


def load_model(path, average_last=None):
    """A `Transformer` from a run folder, a `.keras` file or a checkpoint prefix.

    `.keras` files load on any Keras backend; checkpoints need TensorFlow.

    Args:
        path: see `find_model_files`.
        average_last: with a run folder, average its last N checkpoints instead (paper 6.1).

    Returns:
        `(model, files)`: the `Transformer` and the dict of `find_model_files`, whose
        `vocabulary` is the `SubwordVocabulary` the model carries when it carries one (a
        `.keras` file saved with it), else the `vocab.model` path or None.

    Example:
        >>> model, files = load_model("runs/ende")  # doctest: +SKIP
    """
    import keras

    if average_last:
        from keras_transformer.training import average_checkpoints

        model = average_checkpoints(path, last=average_last)
        vocabulary = OutputDir(path).vocabulary
        return model, {
            "kind": "average",
            "model": path,
            "config": None,
            "vocabulary": vocabulary if os.path.isfile(vocabulary) else None,
        }
    files = find_model_files(path)
    if files["kind"] == "keras":
        import keras_transformer.model  # noqa: F401  (registers the serializable classes)

        model = keras.saving.load_model(files["model"], compile=False)
        if getattr(model, "tokenizer", None) is not None:
            from keras_transformer.data.vocabulary import SubwordVocabulary

            files["vocabulary"] = SubwordVocabulary.from_tokenizer(model.tokenizer)
        return model, files
    if keras.backend.backend() != "tensorflow":
        raise UserInputError(
            f"{files['model']} is a TensorFlow checkpoint: load it with KERAS_BACKEND="
            "tensorflow, or save the model as .keras (keras-transformer average writes one)"
        )
    import tensorflow as tf

    from keras_transformer.config import TransformerConfig
    from keras_transformer.model import build_model
    from keras_transformer.training.checkpoints import model_variables

    if not os.path.isfile(files["config"]):
        raise UserInputError(
            f"cannot find {files['config']!r}, the model config of checkpoint {files['model']}"
        )
    with open(files["config"], encoding="utf-8") as file:
        model = build_model(TransformerConfig.from_json(file.read()))
    # Training's checkpoints key the weights by variable path (see model_variables).
    status = tf.train.Checkpoint(model=model_variables(model)).read(files["model"])
    status.expect_partial()  # the optimizer state is not needed to translate
    status.assert_existing_objects_matched()
    return model, files
