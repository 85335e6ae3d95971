"""Dropout (paper section 5.4) that draws float32 random numbers under mixed precision."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout`, with float32 uniforms for low-precision inputs.

    Keras draws the uniforms in the input's dtype, so under `mixed_bfloat16` every dropout
    draws bfloat16 random numbers and selects in bfloat16, which on a CPU is slower than
    float32 uniforms and one multiply by the scaled keep mask: 1.27-1.32x per dropout on a
    2-core AVX-512 CPU, and the Multi30k recipe has 22 per step
    (docs/decisions.md#dropout-float32-uniforms). Float32
    inputs take Keras's own dropout, bit for bit (the same cost there), so float32 training
    draws exactly as before. Each element is kept with probability `1 - rate` and scaled by
    `1 / (1 - rate)`, as Keras's.

    Args:
        rate: the fraction of the input units to drop, in [0, 1).
        noise_shape, seed: as `keras.layers.Dropout`.

    Example:
    >>> dropout = Dropout(0.5, seed=1, dtype="mixed_bfloat16")
    >>> y = dropout(keras.ops.ones((4, 1000)), training=True)
    >>> sorted(set(keras.ops.convert_to_numpy(keras.ops.cast(y, "float32")).ravel().tolist()))
    [0.0, 2.0]
    """

    def call(self, inputs, training=False):
        if (
            not training
            or self.rate == 0
            or self.noise_shape is not None
            or keras.backend.standardize_dtype(inputs.dtype) in ("float32", "float64")
        ):
            return super().call(inputs, training=training)
        uniforms = keras.random.uniform(
            ops.shape(inputs), dtype="float32", seed=self.seed_generator
        )
        keep = ops.cast(uniforms >= self.rate, inputs.dtype)
        return inputs * (keep * ops.cast(1.0 / (1.0 - self.rate), inputs.dtype))
