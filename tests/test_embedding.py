import math

import numpy as np
from keras import ops

from keras_transformer.layers import SharedEmbedding


def test_embeds_scaled_by_sqrt_d_model_and_projects_with_the_same_matrix():
    layer = SharedEmbedding(vocab_size=11, d_model=16)
    ids = np.array([[3, 0, 10]])
    embedded = ops.convert_to_numpy(layer(ids))
    matrix = ops.convert_to_numpy(layer.embeddings)
    np.testing.assert_allclose(embedded[0], matrix[[3, 0, 10]] * math.sqrt(16), atol=1e-6)
    hidden = np.random.default_rng(0).normal(size=(1, 2, 16)).astype("float32")
    logits = ops.convert_to_numpy(layer(hidden, reverse=True))
    np.testing.assert_allclose(logits, hidden @ matrix.T, atol=1e-5)
    assert len(layer.weights) == 1


def test_unscaled_and_config():
    layer = SharedEmbedding(vocab_size=5, d_model=4, scale=False)
    out = ops.convert_to_numpy(layer(np.array([[1]])))
    np.testing.assert_allclose(out[0, 0], ops.convert_to_numpy(layer.embeddings)[1])
    assert SharedEmbedding.from_config(layer.get_config()).get_config()["scale"] is False
