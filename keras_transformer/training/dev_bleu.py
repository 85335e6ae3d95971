"""Dev BLEU during training: decode a dev subset after each evaluation, log sacreBLEU, keep the
best model and stop early when BLEU stops improving.

The paper chooses beam size and length penalty "after experimentation on the development set"
(6.1); this callback gives the same signal while training runs, with the same search.
"""

import json
import logging
import math
import os

import keras

from keras_transformer.files import atomic_write
from keras_transformer.runs.models import atomic_save_model
from keras_transformer.training.training_model import read_value

logger = logging.getLogger(__name__)


class DevBleu(keras.callbacks.Callback):
    """Translates `sources` with beam search at the end of each Keras epoch (one evaluation
    interval) and adds `val_bleu` (sacreBLEU) and `val_chrf` to the epoch logs.

    With `best_model_path`, the model is saved there (atomically) whenever BLEU improves, with
    `{step, bleu}` in `best_record_path`; with `patience`, training stops after that many
    evaluations without a better BLEU. Place it before the callbacks that log epoch metrics.

    With `history_path`, every evaluation's `{step, bleu, chrf}` is written there
    (atomically); a resumed run drops the entries after its restored step (the checkpoint
    was older than them: those evaluations come again) and recomputes the best BLEU and the
    patience counter from the rest, so that it stops at the step an uninterrupted run stops.
    With `every_steps`, it evaluates after every update whose step is a multiple of it instead
    of at epoch ends (and adds the scores to the logs of the epoch that ends next): a run
    resumed from a checkpoint between two evaluations, whose Keras epochs then end at other
    steps, still evaluates at the steps an uninterrupted run does. The last update of a run
    (at `train_steps`, or stopped by time) is scored too.

    Args:
        sources: dev source sentences (a subset: decoding is slower than scoring).
        references: their reference translations.
        vocabulary: the SentencePiece `.model` path.
        beam_size: beam size (paper: 4).
        alpha: length penalty (paper: 0.6).
        patience: evaluations without improvement before stopping (None: never stop).
        best_model_path: where to keep the best model (`.keras`), or None.
        best_record_path: where to write `{"step": ..., "bleu": ...}` of the best model.
        history_path: where to keep the scores of every evaluation (`dev_bleu.json`), or None.
        every_steps: evaluate at the updates whose step is a multiple of this (None: at the
            end of each Keras epoch).
        write: whether this process writes files (False on non-chief workers; they still
            decode, so that every worker takes the same early-stopping decision).

    Example:
        >>> callback = DevBleu(sources[:500], references[:500], "runs/x/vocab.model",
        ...                    patience=5, best_model_path="runs/x/best.keras")  # doctest: +SKIP
    """

    def __init__(
        self,
        sources,
        references,
        vocabulary,
        *,
        beam_size=4,
        alpha=0.6,
        patience=None,
        best_model_path=None,
        best_record_path=None,
        history_path=None,
        every_steps=None,
        write=True,
    ):
        super().__init__()
        self.sources = list(sources)
        self.references = list(references)
        self.vocabulary = vocabulary
        self.beam_size = beam_size
        self.alpha = alpha
        self.patience = patience
        self.best_model_path = best_model_path
        self.best_record_path = best_record_path
        self.history_path = history_path
        self.history = []
        self.every_steps = every_steps
        self._unlogged = None  # the scores of an evaluation since the last epoch end
        self.write = write
        self.best_bleu = -math.inf
        self.evaluations_without_improvement = 0
        self._translator = None
        if best_record_path and os.path.exists(best_record_path):
            # A resumed run keeps the best model of its earlier part unless it beats it.
            with open(best_record_path, encoding="utf-8") as file:
                self.best_bleu = float(json.load(file)["bleu"])

    def on_train_begin(self, logs=None):
        if not (self.history_path and os.path.exists(self.history_path)):
            return  # a fresh run, or one from before the history (best.json's BLEU only)
        with open(self.history_path, encoding="utf-8") as file:
            saved = json.load(file)
        step = _step(self.model)
        self.history = [entry for entry in saved if entry["step"] <= step]
        self.best_bleu, self.evaluations_without_improvement = -math.inf, 0
        for entry in self.history:
            self._count(entry["bleu"])
        if self.write and len(self.history) < len(saved):
            self._write_history()

    def _count(self, bleu):
        """Updates the best BLEU and the patience counter; returns whether `bleu` is better."""
        if bleu > self.best_bleu:
            self.best_bleu = bleu
            self.evaluations_without_improvement = 0
            return True
        self.evaluations_without_improvement += 1
        return False

    def _write_history(self):
        with atomic_write(self.history_path) as file:
            json.dump(self.history, file, indent=1)

    def score(self):
        """`(bleu, chrf)` of the current weights on the dev subset."""
        from keras_transformer.evaluation import translate_and_evaluate
        from keras_transformer.translation import Translator

        if self._translator is None:
            # Built once: the compiled search reads the model's variables, which training
            # updates in place.
            self._translator = Translator(
                self.model.transformer, self.vocabulary, beam_size=self.beam_size, alpha=self.alpha
            )
        _, report, _ = translate_and_evaluate(self._translator, self.sources, self.references)
        return report.bleu, report.chrf

    def on_train_batch_end(self, batch, logs=None):
        if self.every_steps is not None and _step(self.model) % self.every_steps == 0:
            self._unlogged = self._evaluate()

    def on_epoch_end(self, epoch, logs=None):
        if self.every_steps is None:
            scores = self._evaluate()
        else:
            scores, self._unlogged = self._unlogged, None
            ending = self.model.stop_training and _step(self.model) % self.every_steps
            if ending:  # the final weights of a run that ends between two evaluations
                scores = self._evaluate()
        if scores is not None and logs is not None:
            logs["val_bleu"], logs["val_chrf"] = scores

    def _evaluate(self):
        """Scores the current weights, keeps the best, counts patience; returns the scores."""
        bleu, chrf = self.score()
        step = _step(self.model)
        logger.info("step %d: dev BLEU %.2f, chrF %.2f", step, bleu, chrf)
        improved = self._count(bleu)
        if self.history_path:
            self.history.append({"step": step, "bleu": bleu, "chrf": chrf})
            if self.write:
                self._write_history()
        if improved:
            if self.write and self.best_model_path:
                atomic_save_model(self.model.transformer, self.best_model_path)
            if self.write and self.best_record_path:
                with atomic_write(self.best_record_path) as file:
                    json.dump({"step": step, "bleu": bleu, "chrf": chrf}, file)
            return bleu, chrf
        if self.patience is not None and self.evaluations_without_improvement >= self.patience:
            logger.info(
                "dev BLEU has not improved for %d evaluations (best %.2f): stopping",
                self.evaluations_without_improvement,
                self.best_bleu,
            )
            self.model.stop_training = True
        return bleu, chrf


def _step(model):
    return int(read_value(model.optimizer.iterations))
