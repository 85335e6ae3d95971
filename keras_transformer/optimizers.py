"""The paper's Adam (section 5.3) with one fused kernel per variable on TensorFlow.

Keras's `Adam.update_step` is a dozen element-wise ops per variable (cast, subtract,
multiply, square, sqrt, divide, three assigns), each a pass over the variable's memory. On a
2-core CPU that made the update of the 7.6M-parameter `small` model 13.8 ms per step (65 ms at
base) against 6.4 ms (25 ms) for TensorFlow's fused `ResourceApplyAdam` kernel, which reads
the variable, its two moments and the gradient once (benchmarks/micro/optimizer_throughput.py;
docs/decisions.md#fused-adam). Keras 3 has no fused option, hence this subclass. Its update is Keras's formula term for term:

    alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)
    m <- m + (g - m) * (1 - beta_1);  v <- v + (g^2 - v) * (1 - beta_2)
    variable <- variable - alpha * m / (sqrt(v) + epsilon)

It keeps Keras's moment variables (`_keras_internals.adam_slots`), so checkpoints written with
`keras.optimizers.Adam` restore into it and back. Other backends, AMSGrad, and sparse
(`IndexedSlices`) gradients take Keras's own `update_step`.
"""

import keras

from keras_transformer._keras_internals import adam_slots

_FUSED_DTYPES = ("float16", "bfloat16", "float32", "float64")


@keras.saving.register_keras_serializable(package="keras_transformer")
class FusedAdam(keras.optimizers.Adam):
    """`keras.optimizers.Adam` whose TensorFlow update is one `ResourceApplyAdam` per variable.

    Takes `keras.optimizers.Adam`'s arguments; `keras_transformer.build_optimizer` gives it
    the paper's (beta_1 0.9, beta_2 0.98, epsilon 1e-9, the `NoamSchedule`).

    Example:
    >>> optimizer = FusedAdam(learning_rate=1e-3, beta_2=0.98, epsilon=1e-9)
    >>> variable = keras.Variable([1.0, -2.0])
    >>> optimizer.apply([keras.ops.convert_to_tensor([0.5, 0.5])], [variable])
    >>> [round(float(x), 4) for x in keras.ops.convert_to_numpy(variable)]  # ~lr each
    [0.999, -2.001]
    """

    def update_step(self, gradient, variable, learning_rate):
        if not self._fusable(gradient, variable):
            return super().update_step(gradient, variable, learning_rate)
        import tensorflow as tf

        momentum, velocity = adam_slots(self, variable)
        dtype = variable.dtype

        def handle(v):
            return (v.value if isinstance(v, keras.Variable) else v).handle

        scalars = self._scalars(dtype, learning_rate, handle(variable).device)
        tf.raw_ops.ResourceApplyAdam(
            var=handle(variable),
            m=handle(momentum),
            v=handle(velocity),
            grad=tf.cast(gradient, dtype),
            **scalars,
        )

    def _scalars(self, dtype, learning_rate, device):
        """The update's scalar inputs (beta powers, learning rate, ...), cast to `dtype`.

        Inside a traced train step they are built once per dtype and device and shared by
        every variable's kernel, instead of seven small ops per variable: a smaller graph,
        though the time saved was within the noise of a side-by-side run
        (docs/decisions.md#adam-shared-scalars).
        Eagerly they are built per call (fresh values)."""
        import tensorflow as tf

        graph = None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()
        key = (dtype, device, id(learning_rate))
        cache = getattr(self, "_scalar_cache", None)
        if graph is None or cache is None or cache.graph is not graph:
            # A plain object: TensorFlow's tracking would wrap a dict attribute, and fail
            # to checkpoint one with tuple keys.
            cache = _ScalarCache(graph)
            self._scalar_cache = cache
        if graph is not None and key in cache.scalars:
            return cache.scalars[key]
        step = tf.cast(self.iterations + 1, dtype)
        beta_1 = tf.cast(self.beta_1, dtype)
        beta_2 = tf.cast(self.beta_2, dtype)
        scalars = {
            "beta1_power": tf.pow(beta_1, step),
            "beta2_power": tf.pow(beta_2, step),
            "lr": tf.cast(learning_rate, dtype),
            "beta1": beta_1,
            "beta2": beta_2,
            "epsilon": tf.cast(self.epsilon, dtype),
        }
        if graph is not None:
            cache.scalars[key] = scalars
        return scalars

    def _fusable(self, gradient, variable):
        if keras.backend.backend() != "tensorflow" or self.amsgrad:
            return False
        import tensorflow as tf

        return (
            not isinstance(gradient, tf.IndexedSlices)
            and keras.backend.standardize_dtype(variable.dtype) in _FUSED_DTYPES
        )


class _ScalarCache:
    """`FusedAdam`'s scalar inputs built in one traced graph, by (dtype, device, lr)."""

    def __init__(self, graph):
        self.graph, self.scalars = graph, {}
