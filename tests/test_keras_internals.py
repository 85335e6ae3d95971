"""The private Keras attributes behind `keras_transformer._keras_internals`, checked against
what Keras's public behaviour implies. A failure here means this Keras version renamed or
changed one of them: mend `keras_transformer/_keras_internals.py`, not the callers."""

import inspect

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import _keras_internals as internals
from keras_transformer.layers import Dropout
from keras_transformer.optimizers import FusedAdam

MEND = "this Keras changed it: mend keras_transformer/_keras_internals.py"


class Pair(keras.layers.Layer):
    """A layer holding two sublayers as attributes."""

    def __init__(self, first, second, **kwargs):
        super().__init__(**kwargs)
        self.first = first
        self.second = second

    def call(self, x):
        return self.second(self.first(x))


def require(owner, name):
    assert hasattr(owner, name), f"{type(owner).__name__}.{name} is gone; {MEND}"


def test_flatten_layers_lists_every_nested_layer_once_in_keras_order():
    a1, a2, b = (keras.layers.Dense(2, name=name) for name in ("a1", "a2", "b"))
    inner = Pair(a1, a2, name="inner")
    outer = Pair(inner, b, name="outer")
    require(outer, "_flatten_layers")
    # Breadth-first with each layer's children pushed to the front last-first: checkpoints
    # key seed-generator states by this order, so a change would mismatch older checkpoints.
    names = [layer.name for layer in internals.flatten_layers(outer)]
    assert names == ["outer", "inner", "a2", "a1", "b"], f"{names}; {MEND}"
    names = [layer.name for layer in internals.flatten_layers(outer, include_self=False)]
    assert names == ["inner", "a2", "a1", "b"], f"{names}; {MEND}"


def test_flatten_layers_of_a_functional_model_with_a_shared_layer():
    shared = keras.layers.Dense(3, name="shared")
    left, right = keras.Input((3,), name="left"), keras.Input((3,), name="right")
    outputs = keras.layers.Add(name="add")([shared(left), shared(right)])
    model = keras.Model([left, right], outputs, name="model")
    found = internals.flatten_layers(model, include_self=False)
    assert sorted(layer.name for layer in found) == ["add", "left", "right", "shared"], MEND
    assert internals.flatten_layers(model)[0] is model


@pytest.mark.parametrize("dropout_class", [keras.layers.Dropout, Dropout])
def test_seed_generators_are_a_layers_own_generators(dropout_class):
    dropout = dropout_class(0.5, seed=3)
    require(dropout, "_seed_generators")
    assert internals.seed_generators(dropout) == [dropout.seed_generator], MEND
    # What checkpoints save: the generator's state is a variable of the layer, not a weight.
    state = dropout.seed_generator.state
    assert any(v is state for v in dropout.variables) and not dropout.weights
    holder = Pair(dropout, keras.layers.Dense(2))
    assert internals.seed_generators(holder) == [], "only the layer's own, not its sublayers'"
    found = [
        g for layer in internals.flatten_layers(holder) for g in internals.seed_generators(layer)
    ]
    assert found == [dropout.seed_generator], MEND


@pytest.mark.parametrize("optimizer_class", [keras.optimizers.Adam, FusedAdam])
def test_adam_slots_are_the_moments_of_their_own_variable(optimizer_class):
    first = keras.Variable([1.0, -2.0])
    second = keras.Variable([[3.0], [4.0], [5.0]])
    optimizer = optimizer_class(learning_rate=0.1, beta_1=0.9, beta_2=0.98)
    optimizer.build([first, second])
    for name in ("_get_variable_index", "_momentums", "_velocities"):
        require(optimizer, name)
    g1, g2 = np.array([0.5, -1.0], "float32"), np.array([[2.0], [0.0], [-4.0]], "float32")
    optimizer.apply([tf.constant(g1), tf.constant(g2)], [first, second])
    # One step from zero moments: m = (1 - beta_1) g, v = (1 - beta_2) g^2, worked by hand.
    expected = {
        "first": ([0.05, -0.1], [0.005, 0.02]),
        "second": ([[0.2], [0.0], [-0.4]], [[0.08], [0.0], [0.32]]),
    }
    for name, variable in (("first", first), ("second", second)):
        momentum, velocity = internals.adam_slots(optimizer, variable)
        m, v = expected[name]
        np.testing.assert_allclose(momentum.numpy(), m, rtol=1e-6, err_msg=f"{name}; {MEND}")
        np.testing.assert_allclose(velocity.numpy(), v, rtol=1e-6, err_msg=f"{name}; {MEND}")


def test_fit_calls_the_symbolic_build_hook_that_the_mixin_overrides():
    require(keras.Model, "_maybe_symbolic_build")
    parameters = inspect.signature(keras.Model._maybe_symbolic_build).parameters
    assert {"iterator", "data_batch"} <= set(parameters), f"{list(parameters)}; {MEND}"
    calls = []

    class Recording(keras.Model):
        def _maybe_symbolic_build(self, iterator=None, data_batch=None):
            calls.append("keras")
            return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)

    class Skipping(internals.SkipSymbolicBuildWhenBuilt, Recording):
        pass

    def fit(model_class, build_optimizer):
        inputs = keras.Input((2,))
        model = model_class(inputs, keras.layers.Dense(1)(inputs))
        model.compile(optimizer="sgd", loss="mse")
        if build_optimizer:
            model.optimizer.build(model.trainable_variables)
        calls.clear()
        model.fit(np.ones((4, 2), "float32"), np.ones((4, 1), "float32"), verbose=0)
        return list(calls)

    assert fit(Recording, build_optimizer=True) == ["keras"], f"fit no longer calls it; {MEND}"
    assert fit(Skipping, build_optimizer=True) == []  # built: Keras's build is skipped
    assert fit(Skipping, build_optimizer=False) == ["keras"]
