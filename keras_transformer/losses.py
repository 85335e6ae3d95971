"""Label-smoothed cross-entropy over real target tokens (paper section 5.4), and the metrics
reported beside it: token accuracy and perplexity."""

import keras
from keras import ops
from keras.src.losses.loss import scale_loss_for_distribution  # a no-op off tf.distribute


def _token_log_probs(y_true, y_pred):
    log_probs = ops.log_softmax(ops.cast(y_pred, "float32"), axis=-1)
    labels = ops.cast(y_true, "int32")
    true_log_prob = ops.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
    return log_probs, true_log_prob


@keras.saving.register_keras_serializable(package="keras_transformer")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """Cross-entropy against (1 - eps) one-hot + eps / V uniform, averaged over non-pad tokens.

    The smoothed target spreads eps uniformly over all V classes (Szegedy et al., 2016, the
    paper's reference [30]; also Keras's `label_smoothing`). The sum over every target token
    whose label is not `pad_id` is divided by the number of such tokens, so that short and
    long sentences weigh each of their tokens alike.

    Args:
        label_smoothing: eps_ls (0.1 in the paper).
        pad_id: label id that is ignored.

    Example:
    >>> loss = LabelSmoothedCrossEntropy(label_smoothing=0.1)
    >>> float(loss(keras.ops.array([[1, 0]]), keras.ops.zeros((1, 2, 4))))  # log(4)
    1.3862943649291992
    """

    def __init__(self, label_smoothing=0.1, pad_id=0, name="label_smoothed_cross_entropy",
                 **kwargs):
        # The mean over real tokens is computed here, so Keras must not reduce further.
        kwargs.setdefault("reduction", "sum")
        super().__init__(name=name, **kwargs)
        self.label_smoothing = label_smoothing
        self.pad_id = pad_id

    def __call__(self, y_true, y_pred, sample_weight=None):
        loss = super().__call__(y_true, y_pred, sample_weight)
        # Keras sums gradients over tf.distribute replicas and reports the loss times the
        # replica count; its own reductions divide by that count, and so must one that
        # reduces itself. (`call` stays the plain per-batch mean, for token-exact training.)
        return scale_loss_for_distribution(loss)

    def call(self, y_true, y_pred):
        log_probs, true_log_prob = _token_log_probs(y_true, y_pred)
        eps = self.label_smoothing
        per_token = -(1.0 - eps) * true_log_prob - eps * ops.mean(log_probs, axis=-1)
        weights = ops.cast(ops.not_equal(y_true, self.pad_id), "float32")
        return ops.sum(per_token * weights) / ops.maximum(ops.sum(weights), 1.0)

    def get_config(self):
        return {**super().get_config(), "label_smoothing": self.label_smoothing,
                "pad_id": self.pad_id}


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedTokenAccuracy(keras.metrics.Metric):
    """Fraction of non-pad target tokens whose argmax prediction is the label."""

    def __init__(self, pad_id=0, name="token_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.pad_id = pad_id
        self.correct = self.add_variable((), initializer="zeros", name="correct")
        self.total = self.add_variable((), initializer="zeros", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        weights = ops.cast(ops.not_equal(y_true, self.pad_id), "float32")
        hits = ops.cast(ops.equal(ops.argmax(y_pred, axis=-1), ops.cast(y_true, "int32")),
                        "float32")
        self.correct.assign_add(ops.sum(hits * weights))
        self.total.assign_add(ops.sum(weights))

    def result(self):
        return self.correct / ops.maximum(self.total, 1.0)

    def get_config(self):
        return {**super().get_config(), "pad_id": self.pad_id}


@keras.saving.register_keras_serializable(package="keras_transformer")
class Perplexity(keras.metrics.Metric):
    """exp of the mean negative log-likelihood per non-pad token (no label smoothing): the
    per-wordpiece perplexity of Table 3."""

    def __init__(self, pad_id=0, name="perplexity", **kwargs):
        super().__init__(name=name, **kwargs)
        self.pad_id = pad_id
        self.nll = self.add_variable((), initializer="zeros", name="nll")
        self.total = self.add_variable((), initializer="zeros", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        weights = ops.cast(ops.not_equal(y_true, self.pad_id), "float32")
        _, true_log_prob = _token_log_probs(y_true, y_pred)
        self.nll.assign_add(-ops.sum(true_log_prob * weights))
        self.total.assign_add(ops.sum(weights))

    def result(self):
        return ops.exp(self.nll / ops.maximum(self.total, 1.0))

    def get_config(self):
        return {**super().get_config(), "pad_id": self.pad_id}
