import math

import numpy as np
from keras import ops

import keras_transformer as kt


def _probability_logits(rows):
    return np.log(np.array(rows, "float32"))[None]  # softmax(log p) = p


def test_label_smoothed_loss_equals_hand_computation_on_three_tokens():
    # p rows are the model's distributions over V = 4 classes; the 4th position is padding.
    p = [[0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1], [0.25, 0.25, 0.25, 0.25],
         [0.9, 0.05, 0.03, 0.02]]
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
