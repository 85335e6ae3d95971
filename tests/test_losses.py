import math

import numpy as np
from keras import ops

import keras_transformer as kt
from tests import _preloaded_python
from tests._tensorflow_settings import CHILD_PRELUDE
from tests._training_fixtures import subprocess_env


def _probability_logits(rows):
    return np.log(np.array(rows, "float32"))[None]  # softmax(log p) = p


def test_label_smoothed_loss_equals_hand_computation_on_three_tokens():
    # p rows are the model's distributions over V = 4 classes; the 4th position is padding.
    p = [
        [0.1, 0.2, 0.3, 0.4],
        [0.7, 0.1, 0.1, 0.1],
        [0.25, 0.25, 0.25, 0.25],
        [0.9, 0.05, 0.03, 0.02],
    ]
    labels = np.array([[3, 1, 2, 0]])
    eps = 0.1

    def token_loss(row, label):  # cross-entropy against (1 - eps) one-hot + eps / V uniform
        return -sum(((1 - eps) * (k == label) + eps / 4) * math.log(row[k]) for k in range(4))

    expected = (token_loss(p[0], 3) + token_loss(p[1], 1) + token_loss(p[2], 2)) / 3
    loss = kt.LabelSmoothedCrossEntropy(label_smoothing=eps)(labels, _probability_logits(p))
    assert abs(float(loss) - expected) < 1e-6
    # Worked by hand for the first token: 0.9 * -ln 0.4 + 0.025 * -(ln .1 + ln .2 + ln .3 + ln .4)
    assert abs(token_loss(p[0], 3) - 0.97547) < 1e-4


def test_without_smoothing_it_is_the_mean_nll_of_real_tokens():
    p = [[0.5, 0.5, 0.0001, 0.0001], [0.2, 0.2, 0.2, 0.4]]
    logits = _probability_logits(p)
    loss = kt.LabelSmoothedCrossEntropy(label_smoothing=0.0)(np.array([[1, 0]]), logits)
    probabilities = ops.convert_to_numpy(ops.softmax(logits))[0]
    assert abs(float(loss) + math.log(probabilities[0, 1])) < 1e-6


def test_perplexity_and_accuracy_ignore_padding():
    p = [[0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1], [0.9, 0.05, 0.03, 0.02]]
    labels = np.array([[3, 2, 0]])
    perplexity = kt.Perplexity()
    perplexity.update_state(labels, _probability_logits(p))
    assert abs(float(perplexity.result()) - math.exp(-(math.log(0.4) + math.log(0.1)) / 2)) < 1e-4
    accuracy = kt.MaskedTokenAccuracy()
    accuracy.update_state(labels, _probability_logits(p))
    assert float(accuracy.result()) == 0.5  # right on token 1 (3), wrong on token 2 (0 != 2)


def test_loss_config_round_trip():
    loss = kt.LabelSmoothedCrossEntropy(label_smoothing=0.2, pad_id=0)
    assert kt.LabelSmoothedCrossEntropy.from_config(loss.get_config()).label_smoothing == 0.2


# CHILD_PRELUDE: Grappler off, as in the test processes (tests/_tensorflow_settings.py).
MIRRORED = (
    CHILD_PRELUDE
    + """
import os
os.environ["KERAS_BACKEND"] = "tensorflow"
import numpy as np, tensorflow as tf
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2)
import keras, keras_transformer as kt

config = kt.TransformerConfig(vocab_size=30, num_layers=1, d_model=16, d_ff=32, num_heads=2,
                              dropout=0.0)
rng = np.random.default_rng(0)
inputs = {"source_ids": rng.integers(4, 30, (8, 5)).astype("int32"),
          "target_ids": rng.integers(4, 30, (8, 4)).astype("int32")}
labels = rng.integers(4, 30, (8, 4)).astype("int32")
losses = []
for strategy in (tf.distribute.get_strategy(), tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])):
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = kt.build_model(config)
        model.compile(optimizer=keras.optimizers.SGD(0.0), loss=kt.LabelSmoothedCrossEntropy(0.1))
    losses.append(model.fit(inputs, labels, batch_size=8, epochs=1, verbose=0,
                            shuffle=False).history["loss"][0])
print("LOSSES", *losses)
"""
)


def test_reported_loss_is_the_same_under_mirrored_strategy():
    import sys

    result = _preloaded_python.run(
        [sys.executable, "-c", MIRRORED],
        capture_output=True,
        text=True,
        timeout=300,
        env=subprocess_env(),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    single, mirrored = map(float, result.stdout.split("LOSSES")[-1].split())
    assert abs(single - mirrored) < 1e-4 * single, (single, mirrored)
    assert 2.5 < single < 4.5  # about ln(30) = 3.4 for a random model
