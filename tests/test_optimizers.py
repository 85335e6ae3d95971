"""FusedAdam: Keras's Adam, one `ResourceApplyAdam` per variable on TensorFlow.

The reference is Adam written out in NumPy (float64) from Kingma & Ba's algorithm 1 with the
epsilon-hat form Keras uses; every check also counts whether the fused kernel ran.
"""

import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.optimizers import FusedAdam
from tests._tensorflow_settings import CHILD_PRELUDE
from tests._training_fixtures import run_python
from tests.test_backends import run_without_tensorflow

HYPER = dict(beta_1=0.9, beta_2=0.98, epsilon=1e-9)


def numpy_adam(value, gradients, learning_rates, beta_1=0.9, beta_2=0.98, epsilon=1e-9):
    """`value` after one Adam update per gradient (dense NumPy arrays), in float64."""
    value = np.array(value, "float64")
    m = np.zeros_like(value)
    v = np.zeros_like(value)
    for t, (g, lr) in enumerate(zip(gradients, learning_rates), 1):
        g = np.asarray(g, "float64")
        m = beta_1 * m + (1 - beta_1) * g
        v = beta_2 * v + (1 - beta_2) * g * g
        alpha = lr * np.sqrt(1 - beta_2**t) / (1 - beta_1**t)
        value = value - alpha * m / (np.sqrt(v) + epsilon)
    return value


@pytest.fixture
def fused_calls(monkeypatch):
    """Counts the `ResourceApplyAdam` kernels launched (traced, under tf.function)."""
    calls = []
    kernel = tf.raw_ops.ResourceApplyAdam

    def counting(**kwargs):
        calls.append(kwargs["var"])
        return kernel(**kwargs)

    monkeypatch.setattr(tf.raw_ops, "ResourceApplyAdam", counting)
    return calls


def random_gradients(shape, steps, seed):
    rng = np.random.default_rng(seed)
    # Mixed scales, as real gradients: some entries near zero, where Adam's division is
    # most sensitive to a wrong epsilon placement.
    return [
        rng.normal(size=shape) * rng.choice([1e-4, 1e-2, 1.0], size=shape) for _ in range(steps)
    ]


@pytest.mark.parametrize("compiled", [False, True])
def test_updates_equal_numpy_adam(fused_calls, compiled):
    initial = np.random.default_rng(0).normal(size=(4, 6))
    gradients = random_gradients((4, 6), 5, seed=1)
    variable = keras.Variable(initial.astype("float32"))
    optimizer = FusedAdam(learning_rate=0.01, **HYPER)

    def step(gradient):
        optimizer.apply([gradient], [variable])

    step = tf.function(step) if compiled else step
    for g in gradients:
        step(tf.constant(g, tf.float32))
    expected = numpy_adam(initial, gradients, [0.01] * 5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(variable), expected, rtol=1e-5, atol=1e-6)
    assert len(fused_calls) >= 1  # the fused kernel did the work (traced once if compiled)


def test_a_traced_step_builds_the_scalar_inputs_once():
    # Beta powers, casts of the learning rate and epsilon: once per step, not per variable.
    variables = [keras.Variable(np.full((3,), float(i), "float32")) for i in range(6)]
    optimizer = FusedAdam(learning_rate=0.01, **HYPER)
    optimizer.build(variables)
    step = tf.function(lambda grads: optimizer.apply(grads, variables))
    grads = [tf.ones((3,)) for _ in variables]
    graph = step.get_concrete_function(grads).graph
    op_types = [op.type for op in graph.get_operations()]
    assert op_types.count("ResourceApplyAdam") == 6
    assert op_types.count("Pow") == 2  # beta_1^t and beta_2^t
    step(grads)
    step(grads)  # the shared inputs read the step counter at run time: t = 1, then 2
    expected = numpy_adam(np.zeros(3), [np.ones(3)] * 2, [0.01] * 2) + 5.0
    np.testing.assert_allclose(keras.ops.convert_to_numpy(variables[5]), expected, rtol=1e-6)


def test_noam_schedule_and_whole_model_match_keras_adam(fused_calls):
    """build_optimizer's FusedAdam against keras.optimizers.Adam on every variable of a
    model (tied embeddings, layer norms, biases), the learning rate from the NoamSchedule."""
    config = kt.TransformerConfig(
        vocab_size=40, num_layers=1, d_model=32, d_ff=64, num_heads=4, key_dim=8, value_dim=8
    )
    models = [kt.build_model(config) for _ in range(2)]
    initial = models[0].get_weights()
    models[1].set_weights(initial)
    fused = kt.build_optimizer(32, warmup_steps=4, scale=2.0)
    assert isinstance(fused, FusedAdam)
    plain = keras.optimizers.Adam(learning_rate=kt.NoamSchedule(32, 4, 2.0), **HYPER)
    rng = np.random.default_rng(2)
    variables = [m.trainable_variables for m in models]
    for _ in range(3):
        grads = [tf.constant(rng.normal(size=v.shape), tf.float32) for v in variables[0]]
        fused.apply(grads, variables[0])
        plain.apply(grads, variables[1])
    for a, b in zip(variables[0], variables[1]):
        # float32 rounding in another order: about 1e-7 on updates of about 0.1.
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b), rtol=1e-5, atol=1e-6
        )
    moved = max(np.abs(w - w0).max() for w, w0 in zip(models[0].get_weights(), initial))
    assert moved > 1e-2  # the three updates did move the weights
    assert len(fused_calls) == 3 * len(variables[0])
    assert float(fused.iterations) == 3


def test_sparse_gradients_and_amsgrad_take_keras_update(fused_calls):
    initial = np.random.default_rng(3).normal(size=(5, 3))
    variable = keras.Variable(initial.astype("float32"))
    optimizer = FusedAdam(learning_rate=0.05, **HYPER)
    rows = np.random.default_rng(4).normal(size=(2, 3))
    # Rows 1 and 3 of an embedding: the gradient of a lookup.
    sparse = tf.IndexedSlices(
        tf.constant(rows, tf.float32), tf.constant([1, 3]), tf.constant([5, 3])
    )
    optimizer.apply([sparse], [variable])
    dense = np.zeros((5, 3))
    dense[[1, 3]] = rows
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(variable),
        numpy_adam(initial, [dense], [0.05]),
        rtol=1e-5,
        atol=1e-7,
    )
    assert not fused_calls

    amsgrad = FusedAdam(learning_rate=0.05, amsgrad=True, **HYPER)
    keras_amsgrad = keras.optimizers.Adam(learning_rate=0.05, amsgrad=True, **HYPER)
    pair = [keras.Variable(initial.astype("float32")) for _ in range(2)]
    for g in random_gradients((5, 3), 3, seed=5):
        amsgrad.apply([tf.constant(g, tf.float32)], [pair[0]])
        keras_amsgrad.apply([tf.constant(g, tf.float32)], [pair[1]])
    np.testing.assert_allclose(*map(keras.ops.convert_to_numpy, pair), rtol=1e-6)
    assert not fused_calls


def test_a_keras_adam_checkpoint_resumes_in_fused_adam(tmp_path):
    """Run folders written before FusedAdam hold keras.optimizers.Adam's variables."""
    initial = np.random.default_rng(6).normal(size=(3, 4))
    gradients = random_gradients((3, 4), 4, seed=7)
    old_variable = keras.Variable(initial.astype("float32"))
    old = keras.optimizers.Adam(learning_rate=0.01, **HYPER)
    for g in gradients[:2]:
        old.apply([tf.constant(g, tf.float32)], [old_variable])
    path = tf.train.Checkpoint(optimizer=old, variable=old_variable.value).save(
        str(tmp_path / "ckpt")
    )

    variable = keras.Variable(np.zeros((3, 4), "float32"))
    new = FusedAdam(learning_rate=0.01, **HYPER)
    new.build([variable])
    tf.train.Checkpoint(optimizer=new, variable=variable.value).restore(
        path
    ).assert_existing_objects_matched()
    assert int(new.iterations) == 2
    for g in gradients[2:]:
        new.apply([tf.constant(g, tf.float32)], [variable])
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(variable),
        numpy_adam(initial, gradients, [0.01] * 4),
        rtol=1e-5,
        atol=1e-6,
    )


def test_serializes_with_the_noam_schedule():
    optimizer = kt.build_optimizer(256, warmup_steps=100, scale=0.5)
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(restored) is FusedAdam
    assert (restored.beta_1, restored.beta_2, restored.epsilon) == (0.9, 0.98, 1e-9)
    schedule = keras.optimizers.schedules.deserialize(restored.get_config()["learning_rate"])
    assert isinstance(schedule, kt.NoamSchedule)
    assert schedule.get_config() == {
        "d_model": 256,
        "warmup_steps": 100,
        "scale": 0.5,
    }


MIRRORED = CHILD_PRELUDE + textwrap.dedent("""
    from keras_transformer.training import make_strategy
    strategy = make_strategy("mirrored", num_devices=2)  # before any other TensorFlow op
    import keras, numpy as np, tensorflow as tf
    from keras_transformer.optimizers import FusedAdam
    from tests.test_optimizers import numpy_adam, random_gradients

    initial = np.random.default_rng(8).normal(size=(4, 3))
    per_replica = [random_gradients((4, 3), 3, seed) for seed in (9, 10)]
    calls = []
    kernel = tf.raw_ops.ResourceApplyAdam
    tf.raw_ops.ResourceApplyAdam = lambda **kw: (calls.append(1), kernel(**kw))[1]
    with strategy.scope():
        variable = keras.Variable(initial.astype("float32"))
        optimizer = FusedAdam(learning_rate=0.02, beta_2=0.98, epsilon=1e-9)
        optimizer.build([variable])

    @tf.function
    def step(t):
        def replica_step():
            ctx = tf.distribute.get_replica_context()
            g = tf.gather(tf.constant(np.stack([p for p in per_replica]), tf.float32),
                          ctx.replica_id_in_sync_group)[t]
            optimizer.apply([g], [variable])
        strategy.run(replica_step)

    for t in range(3):
        step(tf.constant(t))
    # Keras sums the replicas' gradients before the update.
    summed = [a + b for a, b in zip(*per_replica)]
    expected = numpy_adam(initial, summed, [0.02] * 3)
    for local in variable.value.values:
        np.testing.assert_allclose(local.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert calls, "the fused kernel did not run"
    print("OK", strategy.num_replicas_in_sync)
""")


def test_mirrored_strategy_updates_every_replica_alike():
    result = run_python(MIRRORED)
    assert "OK 2" in result.stdout


def test_other_backends_take_keras_update():
    script = """
        import numpy as np, keras
        from keras_transformer import build_optimizer
        optimizer = build_optimizer(8, warmup_steps=2)
        variable = keras.Variable(np.ones((2, 2), "float32"))
        optimizer.apply([keras.ops.convert_to_tensor(np.full((2, 2), 0.5, "float32"))],
                        [variable])
        # Step 1 of the NoamSchedule: 8^-0.5 * 1 * 2^-1.5 = 0.125; Adam's first step moves
        # each weight by about the learning rate.
        np.testing.assert_allclose(keras.ops.convert_to_numpy(variable), 1 - 0.125, rtol=1e-5)
        assert not tensorflow_loaded()
        print("OK", type(optimizer).__name__)
    """
    assert "OK FusedAdam" in run_without_tensorflow("jax", script)
