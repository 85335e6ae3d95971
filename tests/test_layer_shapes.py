"""Reshape targets that stay constant, and Dense layers run on flattened rows."""

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.layers.shapes import dense_on_rows, dim, leading_dims, trailing_dims


def test_leading_dims_are_static_or_minus_one_for_the_one_unknown_dim():
    assert leading_dims(keras.ops.zeros((2, 3, 4)), 2) == (2, 3)
    seen = {}

    @tf.function(input_signature=[tf.TensorSpec((None, 3, 4))])
    def one_unknown(x):
        seen["one"] = leading_dims(x, 2)
        return x

    @tf.function(input_signature=[tf.TensorSpec((None, None, 4))])
    def two_unknown(x):
        dims = leading_dims(x, 2)
        seen["two"] = all(tf.is_tensor(dim) for dim in dims)
        return tf.reshape(x, dims + (4,))

    one_unknown(tf.zeros((2, 3, 4)))
    assert seen["one"] == (-1, 3)
    assert two_unknown(tf.zeros((2, 5, 4))).shape == (2, 5, 4)
    assert seen["two"]  # two unknown sizes: read at run time


def test_dim_and_trailing_dims_are_ints_where_static_and_tensors_where_not():
    assert dim(keras.ops.zeros((2, 3)), -1) == 3
    assert trailing_dims(keras.ops.zeros((2, 3, 4)), 1) == (3, 4)
    seen = {}

    @tf.function(input_signature=[tf.TensorSpec((None, 3, None))])
    def partly_unknown(x):
        known = tf.ensure_shape(x[:, :, :2], (None, 3, 2))
        before = len(tf.compat.v1.get_default_graph().get_operations())
        seen["static"] = (dim(x, 1), trailing_dims(known, 1))
        # Known sizes cost no op in the graph (ops.shape would add a Shape op).
        seen["ops"] = len(tf.compat.v1.get_default_graph().get_operations()) - before
        seen["dims"] = (dim(x, 0), dim(x, 1), trailing_dims(x, 1))
        return tf.reshape(x, (-1,) + trailing_dims(x, 1))

    assert partly_unknown(tf.zeros((2, 3, 5))).shape == (2, 3, 5)
    first, second, trailing = seen["dims"]
    assert tf.is_tensor(first) and second == 3
    assert trailing[0] == 3 and tf.is_tensor(trailing[1])
    assert seen["static"] == (3, (3, 2)) and seen["ops"] == 0


def test_dense_on_rows_equals_the_dense_layer_in_numpy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 4)).astype("float32")
    dense = keras.layers.Dense(5, activation="relu")
    out = keras.ops.convert_to_numpy(dense_on_rows(dense, x))
    kernel, bias = (keras.ops.convert_to_numpy(w) for w in dense.weights)
    np.testing.assert_allclose(out, np.maximum(x @ kernel + bias, 0), rtol=1e-5, atol=1e-6)
    assert out.shape == (2, 3, 5)
    np.testing.assert_array_equal(dense_on_rows(dense, x[0]), dense(x[0]))  # 2-D: as is
