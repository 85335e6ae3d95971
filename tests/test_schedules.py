import keras
import pytest

import keras_transformer as kt


def paper_lrate(step_num, d_model=512, warmup_steps=4000):
    """Equation 3 of section 5.3."""
    return d_model**-0.5 * min(step_num**-0.5, step_num * warmup_steps**-1.5)


def test_schedule_equals_formula_3():
    schedule = kt.NoamSchedule(d_model=512, warmup_steps=4000)
    for step_num in (1, 4000, 100000):
        # Keras passes the 0-based iteration count; the paper's step_num starts at 1.
        assert abs(float(schedule(step_num - 1)) - paper_lrate(step_num)) < 1e-10
    assert abs(paper_lrate(4000) - 512**-0.5 * 4000**-0.5) < 1e-12  # hand value at the peak


def test_peak_at_warmup():
    schedule = kt.NoamSchedule(d_model=512, warmup_steps=4000)
    values = [float(schedule(s - 1)) for s in (3000, 3999, 4000, 4001, 5000)]
    assert max(values) == values[2]
    assert values[0] < values[1] < values[2] > values[3] > values[4]


def test_scale_and_serialization():
    schedule = kt.NoamSchedule(d_model=256, warmup_steps=100, scale=2.0)
    restored = keras.optimizers.schedules.deserialize(
        keras.optimizers.schedules.serialize(schedule)
    )
    assert isinstance(restored, kt.NoamSchedule)
    assert abs(float(restored(9)) - 2.0 * paper_lrate(10, 256, 100)) < 1e-10


def schedule_of(optimizer):
    """The optimizer's learning-rate schedule, read back from its public config."""
    return keras.optimizers.schedules.deserialize(optimizer.get_config()["learning_rate"])


def test_optimizer_is_the_papers_adam():
    optimizer = kt.build_optimizer(d_model=512)
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)
    assert isinstance(schedule_of(optimizer), kt.NoamSchedule)
    # The rate Adam applies at update step_num (its `iterations` counts the updates already
    # made), against formula (3) worked out by hand for d_model 512, warmup_steps 4000:
    #   step 1:      512^-0.5 * 1 * 4000^-1.5 = 1 / (22.627 * 252982) = 1.7469e-7 (warmup)
    #   step 4000:   (512 * 4000)^-0.5 = 1 / 1431.08 = 6.9877e-4   (the peak)
    #   step 100000: (512 * 100000)^-0.5 = 1 / 7155.42 = 1.3975e-4 (inverse square root)
    for step_num, expected in ((1, 1.7469e-7), (4000, 6.9877e-4), (100000, 1.3975e-4)):
        optimizer.iterations.assign(step_num - 1)
        assert abs(float(optimizer.learning_rate) / expected - 1) < 1e-4, step_num
    # build_optimizer passes warmup and scale through: 2 * (512 * 100)^-0.5 = 8.8388e-3.
    optimizer = kt.build_optimizer(d_model=512, warmup_steps=10, scale=2.0)
    optimizer.iterations.assign(99)
    assert abs(float(optimizer.learning_rate) / 8.8388e-3 - 1) < 1e-4


def test_linear_decay_against_hand_values():
    # d_model 256, warmup 500, scale 0.3 (the --cpu parsing recipe's), to 0 at update 14000:
    #   peak (step_num 500) = 0.3 * (256 * 500)^-0.5 = 0.3 / 357.77 = 8.3853e-4, NoamSchedule's
    #   step_num 250:   half the peak (warmup)              = 4.1926e-4
    #   step_num 7250:  (14000 - 7250) / 13500 = 0.5 of it  = 4.1926e-4
    #   step_num 14000: 0, and past it still 0 (not negative)
    schedule = kt.LinearDecaySchedule(d_model=256, warmup_steps=500, total_steps=14000, scale=0.3)
    noam = kt.NoamSchedule(d_model=256, warmup_steps=500, scale=0.3)
    assert abs(float(schedule(499)) / 8.3853e-4 - 1) < 1e-4
    assert abs(float(schedule(499)) - float(noam(499))) < 1e-10
    for step_num, expected in ((250, 4.1926e-4), (7250, 4.1926e-4)):
        assert abs(float(schedule(step_num - 1)) / expected - 1) < 1e-4, step_num
    assert float(schedule(13999)) == 0.0 and float(schedule(20000)) == 0.0
    # Straight: equal steps, equal drops.
    values = [float(schedule(s)) for s in (3999, 6999, 9999)]
    assert abs((values[0] - values[1]) - (values[1] - values[2])) < 1e-9
    restored = keras.optimizers.schedules.deserialize(
        keras.optimizers.schedules.serialize(schedule)
    )
    assert isinstance(restored, kt.LinearDecaySchedule)
    assert float(restored(7249)) == float(schedule(7249))


def test_build_optimizer_decay_choice():
    optimizer = kt.build_optimizer(256, 500, 0.3, decay="linear", total_steps=14000)
    assert isinstance(schedule_of(optimizer), kt.LinearDecaySchedule)
    optimizer.iterations.assign(7249)
    assert abs(float(optimizer.learning_rate) / 4.1926e-4 - 1) < 1e-4
    for bad, message in (
        ({"decay": "cosine"}, "decay must be one of"),
        ({"decay": "linear"}, "needs total_steps"),
        ({"decay": "linear", "total_steps": 400}, "below total_steps"),
    ):
        with pytest.raises(ValueError, match=message):
            kt.build_optimizer(256, 500, **bad)


def test_linear_decay_ends_with_the_time_budget_when_it_binds_first():
    elapsed = keras.Variable(0.0, dtype="float64", trainable=False)
    schedule = kt.LinearDecaySchedule(
        d_model=256,
        warmup_steps=500,
        total_steps=14000,
        scale=0.3,
        time_budget=7200.0,
        elapsed=elapsed,
    )
    peak = 0.3 * (256 * 500) ** -0.5
    # Time behind the steps: the step-only line (step_num 7250: half the peak).
    elapsed.assign(600.0)
    assert abs(float(schedule(7249)) / (peak / 2) - 1) < 1e-4
    # Time ahead: 5400 s of 7200 is 3/4 spent, 1/4 left of the line's 1 - 500/14000:
    #   peak * 0.25 / 0.964286 = peak * 0.259259 (hand value), at any step before it.
    elapsed.assign(5400.0)
    assert abs(float(schedule(7249)) / (peak * 0.259259) - 1) < 1e-4
    assert abs(float(schedule(2999)) / (peak * 0.259259) - 1) < 1e-4
    # Still rising in the warmup when that is lower: step_num 100 is 0.2 of the peak.
    assert abs(float(schedule(99)) / (peak * 0.2) - 1) < 1e-4
    # Spent: 0, and never negative past it.
    for seconds in (7200.0, 9000.0):
        elapsed.assign(seconds)
        assert float(schedule(7249)) == 0.0
    # A compiled step reads the variable at every call, not once when traced.
    import tensorflow as tf

    compiled = tf.function(lambda: schedule(7249))
    elapsed.assign(600.0)
    assert abs(float(compiled()) / (peak / 2) - 1) < 1e-4
    elapsed.assign(5400.0)
    assert abs(float(compiled()) / (peak * 0.259259) - 1) < 1e-4
    # Serialized without the variable: the restored schedule counts steps only.
    restored = kt.LinearDecaySchedule.from_config(schedule.get_config())
    assert restored.time_budget == 7200.0 and restored.elapsed is None
    assert abs(float(restored(7249)) / (peak / 2) - 1) < 1e-4
    with pytest.raises(ValueError, match="time_budget must be positive"):
        kt.LinearDecaySchedule(256, 500, 14000, time_budget=0)
