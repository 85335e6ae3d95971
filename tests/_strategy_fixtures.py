"""Shared helpers of the strategy tests (tests/test_training_strategies.py,
*_multi_worker_resume.py): a corpus with its vocabulary trained beforehand, free localhost ports
for a cluster, and what a child process records of a `train()` call: the loss of every update
and the weights before the first.

`STEP_LOSSES` is source code for the child scripts: a Keras callback class `StepLosses` whose
`losses` are each update's token-mean loss, read from the model's running counters
(`loss_seen`, `tokens_seen`: sums over every replica and worker), and whose `initial` holds
the weights as training began.
"""

import socket

from tests._tensorflow_settings import CHILD_PRELUDE
from tests._training_fixtures import write_reverse_corpus

STEP_LOSSES = (
    CHILD_PRELUDE
    + """
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
)


def corpus_with_vocabulary(folder, dev_lines):
    """A reverse-copy corpus (tests/_training_fixtures.py) of 200 training lines and its
    320-piece vocabulary, trained beforehand as a multi-worker run needs it; returns the
    corpus's files and the vocabulary's path."""
    from keras_transformer.data import TextPairCorpus, train_vocabulary

    corpus = write_reverse_corpus(folder / "corpus", train_lines=200, dev_lines=dev_lines)
    vocabulary = train_vocabulary(
        [TextPairCorpus(corpus["train_source"], corpus["train_target"])],
        str(folder / "vocab"),
        vocab_size=320,
    )
    return corpus, vocabulary.path


def free_ports(count):
    """`count` ports free on localhost now (for the workers of a TF_CONFIG cluster)."""
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports
