"""Reshapes whose target shapes stay constant where the tensor's static shape allows.

A decoding step's tensors have one dimension of unknown size (beam search drops finished
sentences from its running batch). A reshape target read with `ops.shape` then costs shape
ops at every step; with -1 for the one unknown dimension it is a constant.
"""

from keras import ops


def leading_dims(x, count):
    """The first `count` dimensions of `x` as a reshape target: static sizes as ints, -1 for
    the unknown one if only one is unknown, else the run-time sizes (`ops.shape`).

    Example:
    >>> leading_dims(keras.ops.zeros((2, 3, 4)), 2)
    (2, 3)
    """
    dims = tuple(x.shape[:count])
    unknown = sum(dim is None for dim in dims)
    if unknown == 0:
        return dims
    if unknown == 1:
        return tuple(-1 if dim is None else dim for dim in dims)
    return tuple(ops.shape(x)[:count])


def dim(x, axis):
    """The size of `x` along `axis`: an int where the static shape knows it (no shape op),
    else a scalar tensor (`ops.shape`).

    Example:
    >>> dim(keras.ops.zeros((2, 3)), -1)
    3
    """
    size = x.shape[axis]
    return size if size is not None else ops.shape(x)[axis]


def trailing_dims(x, start):
    """The dimensions of `x` from `start` on as a reshape target: static sizes as ints when
    all are known (no shape op), else `ops.shape`'s (a tensor for each unknown size).

    Example:
    >>> trailing_dims(keras.ops.zeros((2, 3, 4)), 1)
    (3, 4)
    """
    dims = tuple(x.shape[start:])
    if None not in dims:
        return dims
    return tuple(ops.shape(x)[start:])


def dense_on_rows(dense, x):
    """`dense(x)` for a `keras.layers.Dense` over the last axis, run on the rows of `x`
    flattened to 2-D: on TensorFlow a rank-3 input goes through `tensordot`, which builds
    about ten shape ops per call when a dimension is unknown; one `MatMul` computes the same.

    Example:
    >>> dense = keras.layers.Dense(5)
    >>> dense_on_rows(dense, keras.ops.zeros((2, 3, 4))).shape
    (2, 3, 5)
    """
    if len(x.shape) == 2:
        return dense(x)
    rows = dense(ops.reshape(x, (-1, x.shape[-1])))
    return ops.reshape(rows, leading_dims(x, len(x.shape) - 1) + (rows.shape[-1],))
