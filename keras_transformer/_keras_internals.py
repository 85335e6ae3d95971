"""The few private Keras attributes the project needs, each behind one function.

Keras 3 has no public API for these: a recursive list of a layer's sublayers, a layer's own
seed generators, a built Adam's slot variables for one variable, a hook to skip `fit`'s
symbolic build, and the TensorFlow value behind a (distributed) variable. Keeping them here
means a Keras upgrade that renames one breaks `tests/test_keras_internals.py` with a message
naming it, not training in a subtle way.
"""


def read_value(variable):
    """The value of a Keras variable as a NumPy value (also for distributed variables).

    Reads the backing `tf.Variable` directly: `keras.Variable.numpy()` goes through
    `np.array(variable)`, which warns under NumPy 2.
    """
    return variable.value.numpy()


def flatten_layers(layer, include_self=True):
    """Every layer in `layer`'s tree, each once, in Keras's tracking order.

    `Model.layers` lists only a model's direct sublayers and plain layers list none, so
    this uses `Layer._flatten_layers`. Checkpoints key seed-generator states by this order
    (`runs.checkpoints.seed_generator_states`), so it must not change between versions.
    """
    return list(layer._flatten_layers(include_self=include_self))


def seed_generators(layer):
    """The `keras.random.SeedGenerator`s that `layer` itself holds, not its sublayers'.

    Their states are among `layer.variables` (and not its `weights`), but Keras has no
    public link from a layer to its generators: this reads `Layer._seed_generators`.
    """
    return list(layer._seed_generators)


def adam_slots(optimizer, variable):
    """`(momentum, velocity)`: a built `keras.optimizers.Adam`'s slot variables of `variable`.

    Keras keeps them in the private lists `_momentums` and `_velocities`, indexed by
    `_get_variable_index`; `optimizer.variables` holds them without saying which is whose.
    """
    index = optimizer._get_variable_index(variable)
    return optimizer._momentums[index], optimizer._velocities[index]


class SkipSymbolicBuildWhenBuilt:
    """A `keras.Model` mixin: `fit` does not pull a batch to build a model already built.

    Under a distribution strategy Keras's TensorFlow trainer draws a first batch and reduces
    it across replicas to build the model symbolically, which fails on batches of tuples
    under MultiWorkerMirroredStrategy and on batches that do not split evenly. There is no
    public switch, so this overrides the trainer's private hook `_maybe_symbolic_build`:
    when the optimizer is built (so is the model), there is nothing to build.
    """

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        if self.optimizer is not None and self.optimizer.built:
            return
        super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)
