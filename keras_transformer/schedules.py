"""The learning-rate schedule of section 5.3, equation 3, and the paper's Adam."""

import keras
from keras import ops

from keras_transformer.optimizers import FusedAdam


@keras.saving.register_keras_serializable(package="keras_transformer")
class NoamSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5).

    Linear warmup for `warmup_steps`, then decay with the inverse square root of the step;
    the peak, at step = warmup_steps, is scale * (d_model * warmup_steps)^-0.5.

    Keras counts optimizer iterations from 0, the paper's step_num from 1: the schedule is
    called with the iteration count and evaluates the formula at step_num = iterations + 1,
    so the first update does not get a learning rate of 0.

    Args:
        d_model: model width (512 for base).
        warmup_steps: 4000 in the paper.
        scale: a factor on the whole formula (1.0 in the paper; tensor2tensor's
            `learning_rate` hyperparameter, often 2.0).

    Example:
    >>> schedule = NoamSchedule(d_model=512, warmup_steps=4000)
    >>> round(float(schedule(3999)), 6)   # step_num 4000, the peak
    0.000699
    """

    def __init__(self, d_model, warmup_steps=4000, scale=1.0):
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, step):
        step_num = ops.cast(step, "float32") + 1.0
        return (self.scale * self.d_model ** -0.5
                * ops.minimum(ops.power(step_num, -0.5),
                              step_num * self.warmup_steps ** -1.5))

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps,
                "scale": self.scale}


def build_optimizer(d_model, warmup_steps=4000, scale=1.0, **adam_kwargs):
    """Adam with beta1 = 0.9, beta2 = 0.98, epsilon = 1e-9 (5.3) on a `NoamSchedule`.

    The optimizer is `optimizers.FusedAdam`: Keras's Adam, with one fused kernel per variable
    on TensorFlow.

    Example:
    >>> optimizer = build_optimizer(d_model=512)
    >>> optimizer.beta_2
    0.98
    """
    options = dict(beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    options.update(adam_kwargs)
    return FusedAdam(learning_rate=NoamSchedule(d_model, warmup_steps, scale), **options)
