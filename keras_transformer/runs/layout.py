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
it exists, else `model.keras`; `runs.models` finds and loads it. Every file is written under a
temporary name and renamed into place (`keras_transformer.files`), so a run killed at any
moment leaves each file either complete or absent, never half-written.

Example:
    >>> run = OutputDir("runs/multi30k")
    >>> run.checkpoint_dir
    'runs/multi30k/checkpoints'
"""

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
