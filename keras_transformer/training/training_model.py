"""`TrainingModel`: a Transformer wrapped for `model.fit` with token-exact updates.

The Transformer itself stays a plain functional model (what translation and export load); the
training-only logic lives here: the train step over a tuple of micro-batches (see
`keras_transformer.training.accumulation`), loss scaling for float16, dense embedding
gradients, and the counters that checkpoints and logs read.
"""

import keras
import tensorflow as tf

from keras_transformer._keras_internals import (  # noqa: F401  (read_value: its old home)
    SkipSymbolicBuildWhenBuilt,
    flatten_layers,
    read_value,
)
from keras_transformer.losses import LabelSmoothedCrossEntropy, MaskedTokenAccuracy, Perplexity
from keras_transformer.training.accumulation import count_real_tokens
from keras_transformer.training.fused_loss import fused_projection_loss


class TokenMeanLoss(keras.metrics.Metric):
    """Summed token losses over summed real tokens, across batches.

    Only the ratio is read, so under a distribution strategy `update_state` may take either
    each replica's own sums (the metric adds replicas up when read outside the step) or the
    global sums on every replica (each replica then holds the global ratio).
    """

    def __init__(self, name="loss", **kwargs):
        super().__init__(name=name, **kwargs)
        self.loss_sum = self.add_variable((), initializer="zeros", name="loss_sum")
        self.tokens = self.add_variable((), initializer="zeros", name="tokens")

    def update_state(self, loss_sum, tokens):
        self.loss_sum.assign_add(tf.cast(loss_sum, self.loss_sum.dtype))
        self.tokens.assign_add(tf.cast(tokens, self.tokens.dtype))

    def result(self):
        return self.loss_sum / tf.maximum(self.tokens, 1.0)


class TrainingModel(SkipSymbolicBuildWhenBuilt, keras.Model):
    """Trains a `Transformer` with label-smoothed cross-entropy, one update per `fit` step.

    `fit` data: elements are tuples of micro-batches `((inputs, labels), ...)` from
    `group_micro_batches`. The gradient of an update is the sum of the per-token losses of all
    its micro-batches on all replicas divided by their number of real target tokens (exact,
    whatever the batch shapes). Validation data are plain `(inputs, labels)` batches; they
    report `loss`, `perplexity` (no label smoothing, per subword piece) and `token_accuracy`.

    Counters (variables, saved in checkpoints): `tokens_seen` (real target tokens trained on)
    and `loss_seen` (their summed loss) for logs, and `micro_batches_seen`, the data position
    to resume from.

    `on_train_iterator`: if set, called with the data iterator of `fit` before the first
    batch is drawn from it (the trainer checkpoints it and restores its position there).

    Args:
        transformer: the `Transformer` to train.
        label_smoothing: eps_ls (default: the transformer config's).
        pad_id: the label id that is not a token (default: the config's).
        fused_loss: compute the training loss with `fused_projection_loss` (the same function,
            without float32 logits in memory; `keras_transformer.training.fused_loss`).
            Ignored under float16, whose loss scaling needs the plain path, with
            `jit_compile`, where XLA fuses the plain path itself, and for a model with an
            output bias.

    Example:
        >>> model = TrainingModel(build_model(config))  # doctest: +SKIP
        >>> model.compile(optimizer=build_optimizer(config.d_model))  # doctest: +SKIP
        >>> model.fit(group_micro_batches(batches, 2), steps_per_epoch=100)  # doctest: +SKIP
    """

    def __init__(self, transformer, label_smoothing=None, pad_id=None, fused_loss=True, **kwargs):
        super().__init__(**kwargs)
        config = transformer.config
        self.transformer = transformer
        # The fused loss makes its logits from the embedding matrix alone: a model with an
        # output bias (`config.output_bias`) trains on the plain path.
        self.fused_loss = (
            fused_loss
            and transformer.decoder.compute_dtype != "float16"
            and transformer.output_bias is None
        )
        self.pad_id = config.pad_id if pad_id is None else pad_id
        smoothing = config.label_smoothing if label_smoothing is None else label_smoothing
        self.loss_fn = LabelSmoothedCrossEntropy(smoothing, pad_id=self.pad_id)
        self.loss_tracker = TokenMeanLoss(name="loss")
        self.perplexity_tracker = Perplexity(pad_id=self.pad_id, name="perplexity")
        self.accuracy_tracker = MaskedTokenAccuracy(pad_id=self.pad_id, name="token_accuracy")
        # Counters get the same (all-reduced) value on every replica: keep the first's.
        counter = dict(
            shape=(),
            initializer="zeros",
            trainable=False,
            aggregation="only_first_replica",
            dtype="float64",
        )
        self.tokens_seen = self.add_weight(name="tokens_seen", **counter)
        self.loss_seen = self.add_weight(name="loss_seen", **counter)
        self.micro_batches_seen = self.add_weight(
            name="micro_batches_seen",
            shape=(),
            initializer="zeros",
            trainable=False,
            aggregation="only_first_replica",
            dtype="int64",
        )
        # Weightless sub-layers that the functional graph leaves unbuilt (the attention core)
        # would make Keras re-trace the model symbolically on the first batch under a
        # strategy, which fails on micro-batch tuples; they have nothing to build.
        for layer in flatten_layers(transformer):
            if not layer.built and not layer.weights:
                layer.built = True
        self.built = True
        self.on_train_iterator = None
        self._seen_iterator = None

    def make_train_function(self, force=False):
        super().make_train_function(force=force)
        train_function = self.train_function
        if getattr(train_function, "reports_iterator", False):
            return train_function

        # Keras creates the iterator of `fit`'s data itself and hands it to the train
        # function at every step: the only place where it can be reached before its first
        # batch is drawn.
        def reporting_train_function(iterator):
            if iterator is not self._seen_iterator:
                self._seen_iterator = iterator
                if self.on_train_iterator is not None:
                    self.on_train_iterator(iterator)
            return train_function(iterator)

        reporting_train_function.reports_iterator = True
        self.train_function = reporting_train_function
        return reporting_train_function

    @property
    def metrics(self):
        return [self.loss_tracker, self.perplexity_tracker, self.accuracy_tracker]

    def call(self, inputs, training=False):
        return self.transformer(inputs, training=training)

    def _loss_sum(self, labels, logits):
        """Summed label-smoothed loss over real tokens (the loss returns their mean)."""
        tokens = count_real_tokens(labels, self.pad_id)
        return self.loss_fn.call(labels, logits) * tf.maximum(tokens, 1.0), tokens

    def _train_loss_sum(self, inputs, labels):
        # Under XLA the chunk loop ran 7x slower than the plain path, which XLA fuses itself.
        if not self.fused_loss or self.jit_compile:
            return self._loss_sum(labels, self.transformer(inputs, training=True))[0]
        transformer = self.transformer
        memory, memory_mask = transformer.encode(inputs["source_ids"], training=True)
        states = transformer.decoder_states(
            inputs["target_ids"], memory, memory_mask, training=True
        )
        matrix = keras.ops.cast(transformer.output_projection.embeddings, states.dtype)
        return fused_projection_loss(
            states, matrix, labels, self.loss_fn.label_smoothing, self.pad_id
        )

    def train_step(self, data):
        micro_batches = tuple(data)
        replica_context = tf.distribute.get_replica_context()
        local_tokens = tf.add_n(
            [count_real_tokens(labels, self.pad_id) for _, labels in micro_batches]
        )
        total_tokens = local_tokens
        if replica_context is not None and replica_context.num_replicas_in_sync > 1:
            total_tokens = replica_context.all_reduce(tf.distribute.ReduceOp.SUM, local_tokens)
        denominator = tf.maximum(total_tokens, 1.0)

        variables = self.transformer.trainable_variables
        summed_gradients = None
        local_loss_sum = tf.constant(0.0)
        for inputs, labels in micro_batches:
            # Micro-batches run one after the other, so that only one holds activations.
            with tf.control_dependencies(summed_gradients or []):
                with tf.GradientTape() as tape:
                    loss_sum = self._train_loss_sum(inputs, labels)
                    scaled = self.optimizer.scale_loss(loss_sum / denominator)
                gradients = tape.gradient(scaled, variables)
            # Embedding gradients come as IndexedSlices (from the gather); make them dense
            # here: the sum over micro-batches and the all-reduce then see plain tensors,
            # which also keeps Keras 3 + MirroredStrategy off its IndexedSlices path
            # (keras-team/keras#21069).
            gradients = [
                tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in gradients
            ]
            if summed_gradients is None:
                summed_gradients = gradients
            else:
                summed_gradients = [a + b for a, b in zip(summed_gradients, gradients)]
            local_loss_sum += loss_sum
        self.optimizer.apply(summed_gradients, variables)

        total_loss_sum = local_loss_sum
        if replica_context is not None and replica_context.num_replicas_in_sync > 1:
            total_loss_sum = replica_context.all_reduce(tf.distribute.ReduceOp.SUM, local_loss_sum)
        # Keras metric variables are per replica (sync on read) and the logs of a step are
        # the mean over replicas of each replica's result: with the global sums on every
        # replica, that mean is the exact token mean of the update.
        self.loss_tracker.update_state(total_loss_sum, total_tokens)
        self.tokens_seen.assign_add(tf.cast(total_tokens, "float64"))
        self.loss_seen.assign_add(tf.cast(total_loss_sum, "float64"))
        self.micro_batches_seen.assign_add(tf.constant(len(micro_batches), "int64"))
        return _step_logs({"loss": self.loss_tracker.result()})

    def test_step(self, data):
        inputs, labels = data
        logits = self.transformer(inputs, training=False)
        loss_sum, tokens = self._loss_sum(labels, logits)
        self.loss_tracker.update_state(loss_sum, tokens)
        self.perplexity_tracker.update_state(labels, logits)
        self.accuracy_tracker.update_state(labels, logits)
        return _step_logs({metric.name: metric.result() for metric in self.metrics})


def _step_logs(logs):
    """The logs a step returns, shaped so that Keras can reduce them over replicas.

    Under MultiWorkerMirroredStrategy, Keras 3 reduces step outputs with
    `strategy.reduce("MEAN", value, axis=0)`, which fails on scalars ("Invalid reduction
    dimension 0 for input with 0 dimensions"); a `[1]` vector reduces to the scalar mean.
    """
    if isinstance(tf.distribute.get_strategy(), tf.distribute.MultiWorkerMirroredStrategy):
        return {name: tf.reshape(value, [1]) for name, value in logs.items()}
    return logs
