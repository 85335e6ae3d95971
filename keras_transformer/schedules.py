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
        return (
            self.scale
            * self.d_model**-0.5
            * ops.minimum(ops.power(step_num, -0.5), step_num * self.warmup_steps**-1.5)
        )

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}


@keras.saving.register_keras_serializable(package="keras_transformer")
class LinearDecaySchedule(keras.optimizers.schedules.LearningRateSchedule):
    """`NoamSchedule`'s warmup to the same peak, then a straight line to 0 at `total_steps`.

    lrate = peak * min(step_num / warmup_steps, (total_steps - step_num) / (total_steps -
    warmup_steps)), peak = scale * (d_model * warmup_steps)^-0.5, step_num = iterations + 1
    as in `NoamSchedule`. Not the paper's: for a run whose length is fixed in advance
    (fairseq's `polynomial_decay` with power 1; Li et al. 2020, "Budgeted Training", found
    linear decay the best schedule under a fixed budget). For the `--cpu` parsing recipe it
    gave 83.21 dev F1 after 14000 updates against 80.46 / 81.66 for the inverse square root
    (docs/decisions.md#linear-decay).

    With a time budget the line also ends when the time does: the fraction of the budget
    left is the smaller of the steps' and the time's, `1 - max(step_num / total_steps,
    elapsed / time_budget)`, so a run stopped by a time limit (`schedule.max_train_minutes`)
    on a slow machine still ends at a rate of 0, and on a fast one the steps end first and
    the rate is the step-only line. Then the rate depends on the machine's speed: two runs
    agree bit for bit only where the steps bind.

    Args:
        d_model: model width.
        warmup_steps: updates of linear warmup.
        total_steps: the update at which the rate reaches 0 (the run's `train_steps`);
            the rate stays 0 past it.
        scale: a factor on the peak, as `NoamSchedule`'s.
        time_budget: seconds of training the line may also end at (None: steps only).
        elapsed: a scalar variable of the seconds trained so far (the trainer's
            `train_seconds`, kept by `StopAfterMinutes`), read at every update: in a
            `tf.function` step it is read live; a `jax.jit` step would freeze its value.
            Not serialized: a restored schedule counts steps only.

    Example:
    >>> schedule = LinearDecaySchedule(d_model=256, warmup_steps=500, total_steps=1500)
    >>> [round(float(schedule(s)) / float(schedule(499)), 3) for s in (249, 499, 999, 1499)]
    [0.5, 1.0, 0.5, 0.0]
    """

    def __init__(
        self, d_model, warmup_steps, total_steps, scale=1.0, time_budget=None, elapsed=None
    ):
        if not 0 < warmup_steps < total_steps:
            raise ValueError(
                f"warmup_steps ({warmup_steps}) must be positive and below "
                f"total_steps ({total_steps})"
            )
        if time_budget is not None and not time_budget > 0:
            raise ValueError(f"time_budget must be positive seconds or None, got {time_budget}")
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.scale = scale
        self.time_budget = time_budget
        self.elapsed = elapsed

    def __call__(self, step):
        step_num = ops.cast(step, "float32") + 1.0
        peak = self.scale * (self.d_model * self.warmup_steps) ** -0.5
        rising = step_num / self.warmup_steps
        spent = step_num / self.total_steps
        if self.time_budget is not None and self.elapsed is not None:
            seconds = ops.cast(getattr(self.elapsed, "value", self.elapsed), "float32")
            spent = ops.maximum(spent, seconds / self.time_budget)
        # (1 - spent) / (1 - warmup / total) is (total - step_num) / (total - warmup) when
        # the steps bind: the line from the peak at the warmup's end to 0 at total_steps.
        falling = (1.0 - spent) / (1.0 - self.warmup_steps / self.total_steps)
        return peak * ops.maximum(ops.minimum(rising, falling), 0.0)

    def get_config(self):
        return {
            "d_model": self.d_model,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
            "scale": self.scale,
            "time_budget": self.time_budget,
        }


# `schedule.decay` in a training config -> the schedule class.
DECAYS = ("rsqrt", "linear")


def build_schedule(
    d_model,
    warmup_steps=4000,
    scale=1.0,
    decay="rsqrt",
    total_steps=None,
    time_budget=None,
    elapsed=None,
):
    """The learning-rate schedule: `NoamSchedule` ("rsqrt", the paper's) or
    `LinearDecaySchedule` ("linear", to 0 at `total_steps` or at `time_budget` seconds of
    `elapsed`, whichever comes first)."""
    if decay == "rsqrt":
        return NoamSchedule(d_model, warmup_steps, scale)
    if decay == "linear":
        if total_steps is None:
            raise ValueError("decay='linear' needs total_steps")
        return LinearDecaySchedule(d_model, warmup_steps, total_steps, scale, time_budget, elapsed)
    raise ValueError(f"decay must be one of {DECAYS}, got {decay!r}")


def build_optimizer(
    d_model,
    warmup_steps=4000,
    scale=1.0,
    decay="rsqrt",
    total_steps=None,
    time_budget=None,
    elapsed=None,
    **adam_kwargs,
):
    """Adam with beta1 = 0.9, beta2 = 0.98, epsilon = 1e-9 (5.3) on a `NoamSchedule`
    (`decay="linear"`: a `LinearDecaySchedule` to 0 at `total_steps`, or at `time_budget`
    seconds of `elapsed`).

    The optimizer is `optimizers.FusedAdam`: Keras's Adam, with one fused kernel per variable
    on TensorFlow.

    Example:
    >>> optimizer = build_optimizer(d_model=512)
    >>> optimizer.beta_2
    0.98
    """
    options = dict(beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    options.update(adam_kwargs)
    schedule = build_schedule(
        d_model, warmup_steps, scale, decay, total_steps, time_budget, elapsed
    )
    return FusedAdam(learning_rate=schedule, **options)
