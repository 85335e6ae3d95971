"""What the strategy tests record of a `train()` call in a child process: the loss of every
update and the weights before the first and after the last (tests/test_training_strategies*.py).

`STEP_LOSSES` is source code for the child scripts: a Keras callback class `StepLosses` whose
`losses` are each update's token-mean loss, read from the model's running counters
(`loss_seen`, `tokens_seen`: sums over every replica and worker), and whose `initial` holds
the weights as training began.
"""

STEP_LOSSES = """
import keras as _keras
from keras_transformer.training.training_model import read_value as _read_value


class StepLosses(_keras.callbacks.Callback):
    def _sums(self):
        return (float(_read_value(self.model.loss_seen)),
                float(_read_value(self.model.tokens_seen)))

    def on_train_begin(self, logs=None):
        self.losses, self.mark = [], self._sums()
        self.initial = [_keras.ops.convert_to_numpy(w) for w in self.model.transformer.weights]

    def on_train_batch_end(self, batch, logs=None):
        (loss, tokens), (last_loss, last_tokens) = self._sums(), self.mark
        self.mark = (loss, tokens)
        self.losses.append((loss - last_loss) / (tokens - last_tokens))
"""
