"""Layer normalization (paper section 3.1, Ba et al. 2016) with a hand-written gradient."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class LayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` over the last axis, with the gradient written out.

    The same function, weights (`gamma`, `beta`) and weight names as Keras's layer; only the
    backward pass of training differs (outside training, e.g. in decoding and exports, this
    is Keras's call). Keras computes the mean and variance with `moments` and lets
    autodiff differentiate them: on TensorFlow, about 33 kernels forward and backward, two of
    them `Tile`s that write full-size copies of the broadcast statistics; with the closed form

        dx = inv * (g - mean(g) - x_hat * mean(g * x_hat)),  g = dy * gamma

    about 20, and the Transformer has 2-3 normalizations per layer on every token
    (docs/decisions.md#layer-norm-gradient). No Keras op has this gradient, hence it is
    written here. On PyTorch, Keras's own call already runs `torch.nn.functional.layer_norm` (a fused
    kernel with its own gradient) and is used as is; so are settings other than the
    Transformer's (another axis, no centring or scaling, `rms_scaling`). Statistics and
    gradients are computed in float32 and cast to the input's dtype, as Keras's layer.

    Args:
        epsilon, and the rest: as `keras.layers.LayerNormalization`.

    Example:
    >>> norm = LayerNormalization(epsilon=1e-6)
    >>> y = norm(keras.ops.convert_to_tensor([[1.0, 2.0, 3.0, 6.0]]))
    >>> [round(float(v), 3) for v in keras.ops.convert_to_numpy(y)[0]]
    [-1.0, -0.535, -0.069, 1.604]
    """

    def call(self, inputs, training=None):
        if (
            not training
            or keras.backend.backend() not in ("tensorflow", "jax")
            or self.rms_scaling
            or not (self.center and self.scale)
            or list(self.axis) not in ([len(inputs.shape) - 1], [-1])
        ):
            return super().call(inputs)
        # Float32 values, not the variables: TensorFlow's custom gradient would otherwise ask
        # the gradient function for the variables' gradients separately.
        return _layer_norm(
            inputs, ops.cast(self.gamma, "float32"), ops.cast(self.beta, "float32"), self.epsilon
        )


def _layer_norm(x, gamma, beta, epsilon):
    """y = (x - mean) / sqrt(var + epsilon) * gamma + beta over the last axis of `x`."""
    dtype = x.dtype
    width = x.shape[-1]

    @ops.custom_gradient
    def forward(x, gamma, beta):
        x32 = ops.cast(x, "float32")
        mean = ops.mean(x32, axis=-1, keepdims=True)
        centered = x32 - mean
        inv = ops.rsqrt(ops.mean(ops.square(centered), axis=-1, keepdims=True) + epsilon)
        x_hat = centered * inv

        def backward(*args, upstream=None):
            dy = ops.cast(args[0] if upstream is None else upstream, "float32")
            g = dy * gamma
            dx = inv * (
                g
                - ops.mean(g, axis=-1, keepdims=True)
                - x_hat * ops.mean(g * x_hat, axis=-1, keepdims=True)
            )
            rows_dy = ops.reshape(dy, (-1, width))
            d_gamma = ops.sum(ops.reshape(dy * x_hat, (-1, width)), axis=0)
            return ops.cast(dx, dtype), d_gamma, ops.sum(rows_dy, axis=0)

        return ops.cast(x_hat * gamma + beta, dtype), backward

    return forward(x, gamma, beta)
