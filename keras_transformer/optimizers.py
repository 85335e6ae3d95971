"""The paper's Adam (section 5.3) with one fused kernel per variable on TensorFlow.

Keras's `Adam.update_step` is a dozen element-wise ops per variable (cast, subtract,
multiply, square, sqrt, divide, three assigns), each a pass over the variable's memory. On a
2-core CPU that made the update of the 7.6M-parameter `small` model 13.8 ms per step (65 ms at
base) against 6.4 ms (25 ms) for TensorFlow's fused `ResourceApplyAdam` kernel, which reads
the variable, its two moments and the gradient once (benchmarks/optimizer_throughput.py;
benchmarks/README.md, "A fused Adam update"). Keras 3 has no fused option, hence this
subclass. Its update is Keras's formula term for term:

    alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)
    m <- m + (g - m) * (1 - beta_1);  v <- v + (g^2 - v) * (1 - beta_2)
    variable <- variable - alpha * m / (sqrt(v) + epsilon)

It keeps Keras's variables (`_momentums`, `_velocities`), so checkpoints written with
`keras.optimizers.Adam` restore into it and back. Other backends, AMSGrad, and sparse
(`IndexedSlices`) gradients take Keras's own `update_step`.
"""

import keras

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

        index = self._get_variable_index(variable)
        momentum, velocity = self._momentums[index], self._velocities[index]
        dtype = variable.dtype

        def handle(v):
            return (v.value if isinstance(v, keras.Variable) else v).handle

        step = tf.cast(self.iterations + 1, dtype)
        beta_1 = tf.cast(self.beta_1, dtype)
        beta_2 = tf.cast(self.beta_2, dtype)
        tf.raw_ops.ResourceApplyAdam(
            var=handle(variable), m=handle(momentum), v=handle(velocity),
            beta1_power=tf.pow(beta_1, step), beta2_power=tf.pow(beta_2, step),
            lr=tf.cast(learning_rate, dtype), beta1=beta_1, beta2=beta_2,
            epsilon=tf.cast(self.epsilon, dtype), grad=tf.cast(gradient, dtype))

    def _fusable(self, gradient, variable):
        if keras.backend.backend() != "tensorflow" or self.amsgrad:
            return False
        import tensorflow as tf

        return (not isinstance(gradient, tf.IndexedSlices)
                and keras.backend.standardize_dtype(variable.dtype) in _FUSED_DTYPES)
