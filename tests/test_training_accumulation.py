"""Token-exact accumulation: N micro-batches make the same update as one batch of all of them."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TransformerConfig, build_model
from keras_transformer.losses import LabelSmoothedCrossEntropy
from keras_transformer.training import TrainingModel, group_micro_batches
from tests._training_fixtures import max_abs_difference

CONFIG = TransformerConfig(
    vocab_size=48,
    num_layers=1,
    d_model=32,
    d_ff=64,
    num_heads=4,
    dropout=0.0,
    shared_embeddings="none",
)


def _micro_batch(rng, batch, source_length, target_length):
    """Random ids with a different amount of right padding in each row."""

    def ids(length):
        values = rng.integers(4, CONFIG.vocab_size, size=(batch, length)).astype("int32")
        for row in range(batch):
            values[row, rng.integers(1, length + 1) :] = 0  # keep at least one real token
        return values

    source = ids(source_length)
    labels = ids(target_length)
    target = np.concatenate([np.full((batch, 1), 2, "int32"), labels[:, :-1]], axis=1)
    target[labels == 0] = 0
    return {"source_ids": source, "target_ids": target}, labels


def _pad(array, length):
    return np.pad(array, [(0, 0), (0, length - array.shape[1])])


def _concatenate(first, second):
    """One batch holding both micro-batches, padded to the longer of each side."""
    (inputs_a, labels_a), (inputs_b, labels_b) = first, second
    inputs = {}
    for key in inputs_a:
        length = max(inputs_a[key].shape[1], inputs_b[key].shape[1])
        inputs[key] = np.concatenate([_pad(inputs_a[key], length), _pad(inputs_b[key], length)])
    length = max(labels_a.shape[1], labels_b.shape[1])
    return inputs, np.concatenate([_pad(labels_a, length), _pad(labels_b, length)])


def _update(model, initial, micro_batches):
    """Weights after one train_step with SGD(learning_rate=1): initial - gradient."""
    model.transformer.set_weights(initial)
    model.train_step(tuple(micro_batches))
    return model.transformer.get_weights()


@pytest.fixture(scope="module")
def setup():
    keras.utils.set_random_seed(3)
    model = TrainingModel(build_model(CONFIG))
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=1.0))
    model.optimizer.build(model.transformer.trainable_variables)
    rng = np.random.default_rng(0)
    # Different batch sizes, lengths and padding: short, padded batches are where a uniform
    # average of per-batch means goes wrong.
    first = _micro_batch(rng, batch=3, source_length=5, target_length=4)
    second = _micro_batch(rng, batch=2, source_length=7, target_length=9)
    return model, model.transformer.get_weights(), first, second


def test_two_micro_batches_equal_one_batch_of_both(setup):
    model, initial, first, second = setup
    accumulated = _update(model, initial, [first, second])
    combined = _update(model, initial, [_concatenate(first, second)])
    difference = max_abs_difference(accumulated, combined)
    print("accumulated vs combined:", difference)
    assert difference < 1e-5
    # The update is not trivial: the weights moved.
    assert max_abs_difference(accumulated, initial) > 1e-3


def test_uniform_average_of_batch_means_would_differ(setup):
    """What Keras's gradient_accumulation_steps computes is measurably different here, so the
    test above can tell the two apart."""
    model, initial, first, second = setup
    accumulated = _update(model, initial, [first, second])
    model.transformer.set_weights(initial)
    loss = LabelSmoothedCrossEntropy(CONFIG.label_smoothing)
    variables = model.transformer.trainable_variables
    mean_gradient = None
    for inputs, labels in (first, second):
        with tf.GradientTape() as tape:
            value = loss(labels, model.transformer(inputs, training=True))
        gradients = [tf.convert_to_tensor(g) / 2 for g in tape.gradient(value, variables)]
        mean_gradient = (
            gradients
            if mean_gradient is None
            else [a + b for a, b in zip(mean_gradient, gradients)]
        )
    by_name = {v.path: g.numpy() for v, g in zip(variables, mean_gradient)}
    uniform = [
        w - by_name[v.path] if v.path in by_name else w
        for v, w in zip(model.transformer.weights, initial)
    ]
    difference = max_abs_difference(accumulated, uniform)
    print("token-exact vs uniform:", difference)
    assert difference > 1e-4


def test_group_micro_batches_keeps_order_and_shapes():
    rng = np.random.default_rng(1)
    batches = [
        _micro_batch(rng, batch=b, source_length=s, target_length=t)
        for b, s, t in ((2, 3, 4), (4, 5, 2), (1, 6, 6), (3, 2, 3), (2, 2, 2))
    ]
    spec = (
        {
            "source_ids": tf.TensorSpec([None, None], tf.int32),
            "target_ids": tf.TensorSpec([None, None], tf.int32),
        },
        tf.TensorSpec([None, None], tf.int32),
    )
    dataset = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec)
    groups = list(group_micro_batches(dataset, 2))
    assert len(groups) == 2  # the fifth batch does not fill a group
    for group_index, group in enumerate(groups):
        assert len(group) == 2
        for position, (inputs, labels) in enumerate(group):
            expected_inputs, expected_labels = batches[2 * group_index + position]
            np.testing.assert_array_equal(labels.numpy(), expected_labels)
            np.testing.assert_array_equal(
                inputs["source_ids"].numpy(), expected_inputs["source_ids"]
            )
    single = list(group_micro_batches(dataset, 1))
    assert len(single) == 5 and len(single[0]) == 1
