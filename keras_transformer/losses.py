"""Label-smoothed cross-entropy over real target tokens (paper section 5.4), and the metrics
reported beside it: token accuracy and perplexity."""

import keras
from keras import ops


def _smoothed_nll(y_true, y_pred, label_smoothing):
    """Per-token cross-entropy against (1 - eps) one-hot + eps / V uniform.

    -sum_v q_v log p_v = logsumexp(z) - sum_v q_v z_v, as sum_v q_v = 1: log-softmax is
    never materialized and the label's logit is picked with a one-hot product, not
    `take_along_axis`, whose TensorFlow gather and gradient scatter over [tokens, V] made
    the loss about 3x as slow (docs/decisions.md#one-hot-label-loss).
    """
    logits = ops.cast(y_pred, "float32")
    vocab_size = ops.shape(logits)[-1]
    target = ops.one_hot(ops.cast(y_true, "int32"), vocab_size, dtype="float32")
    if label_smoothing:
        target = (1.0 - label_smoothing) * target + label_smoothing / vocab_size
    return ops.logsumexp(logits, axis=-1) - ops.sum(logits * target, axis=-1)


def _divide_by_replicas(loss):
    """`loss` / the number of tf.distribute replicas in sync (a no-op off tf.distribute).

    Keras's TensorFlow trainer multiplies the reported loss by the replica count, and its own
    reductions divide by it (with `keras.src.losses.loss.scale_loss_for_distribution`, which
    is private, so it is written again here with public TensorFlow API). If Keras changes that
    convention, `test_reported_loss_is_the_same_under_mirrored_strategy` fails.
    """
    if keras.backend.backend() != "tensorflow":
        return loss
    import tensorflow as tf

    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    return loss if replicas == 1 else loss * ops.cast(1.0 / replicas, loss.dtype)


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

    def __init__(
        self, label_smoothing=0.1, pad_id=0, name="label_smoothed_cross_entropy", **kwargs
    ):
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
        return _divide_by_replicas(loss)

    def call(self, y_true, y_pred):
        per_token = _smoothed_nll(y_true, y_pred, self.label_smoothing)
        weights = ops.cast(ops.not_equal(y_true, self.pad_id), "float32")
        return ops.sum(per_token * weights) / ops.maximum(ops.sum(weights), 1.0)

    def get_config(self):
        return {
            **super().get_config(),
            "label_smoothing": self.label_smoothing,
            "pad_id": self.pad_id,
        }


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
        hits = ops.cast(
            ops.equal(ops.argmax(y_pred, axis=-1), ops.cast(y_true, "int32")), "float32"
        )
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
        self.nll.assign_add(ops.sum(_smoothed_nll(y_true, y_pred, 0.0) * weights))
        self.total.assign_add(ops.sum(weights))

    def result(self):
        return ops.exp(self.nll / ops.maximum(self.total, 1.0))

    def get_config(self):
        return {**super().get_config(), "pad_id": self.pad_id}
