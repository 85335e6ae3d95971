"""The SavedModel's `translate_sample` signature: one sampled translation per text, with
per-request `top_k`, `top_p`, `temperature`, `max_extra_length` and `seed`.

The noise that `keras_transformer.decoding.sampling.sample` takes is drawn with a stateless
random op from `seed`: the same seed and settings give the same translation, and
`sample(model, source_ids, noise=tf.random.stateless_uniform([buffer_length, batch],
[seed, 0]))` reproduces it in Python. A signature of its own, as `translate_with_prefix`:
TF Serving's REST API needs every input of the signature it calls.
"""

import tensorflow as tf

from keras_transformer.decoding.greedy import decode_token_by_token
from keras_transformer.decoding.incremental import NEG_INF
from keras_transformer.decoding.length_penalty import max_output_lengths
from keras_transformer.decoding.sampling import nucleus
from keras_transformer.decoding.settings import (
    MESSAGE,
    MESSAGE_AT_LEAST,
    MESSAGE_LOW_EXCLUSIVE,
    RANGES,
)

# `sample()`'s ValueError for a temperature of 0 or less, as a range.
TEMPERATURE_MESSAGE = "temperature={} is out of range: it must be a finite number above 0"


def sampling_signature():
    """Inputs: `text` `[batch]` string and the scalar sampling settings."""
    return [
        tf.TensorSpec([None], tf.string, name="text"),
        tf.TensorSpec([], tf.int32, name="top_k"),
        tf.TensorSpec([], tf.float32, name="top_p"),
        tf.TensorSpec([], tf.float32, name="temperature"),
        tf.TensorSpec([], tf.int32, name="max_extra_length"),
        tf.TensorSpec([], tf.int64, name="seed"),
    ]


def _assert(valid, template, value):
    return tf.debugging.Assert(valid, [tf.strings.format(template, [value])])


def check_sampling_settings(top_k, top_p, temperature, max_extra_length):
    """Graph asserts of the Python rule (`check_decoding_settings` for `top_p` and
    `max_extra_length`, `sample()` for `top_k` >= 0 and `temperature` > 0): a request outside
    them fails with InvalidArgument whose message names the input."""
    kind, low, high = RANGES["top_p"]
    p_message = MESSAGE_LOW_EXCLUSIVE.format(
        name="top_p", value="{}", kind=kind, low=low, high=high
    )
    kind, low, high = RANGES["max_extra_length"]
    length_message = MESSAGE.format(
        name="max_extra_length", value="{}", kind=kind, low=low, high=high
    )
    checks = [
        _assert(
            top_k >= 0,
            MESSAGE_AT_LEAST.format(name="top_k", value="{}", kind="an integer", low=0),
            top_k,
        ),
        _assert(
            tf.logical_and(tf.logical_and(top_p > 0, top_p <= 1), tf.math.is_finite(top_p)),
            p_message,
            top_p,
        ),
        _assert(
            tf.logical_and(temperature > 0, tf.math.is_finite(temperature)),
            TEMPERATURE_MESSAGE,
            temperature,
        ),
        _assert(
            tf.logical_and(max_extra_length >= low, max_extra_length <= high),
            length_message,
            max_extra_length,
        ),
    ]
    with tf.control_dependencies(checks):
        return [tf.identity(v) for v in (top_k, top_p, temperature, max_extra_length)]


def graph_sample_tokens(log_probs, uniform, top_k, temperature, top_p):
    """`sampling.sample_tokens` with tensor settings: the same ops, with `tf.cond` where
    the Python function branches on a setting's value (a request's setting is a tensor)."""
    vocab = tf.shape(log_probs)[-1]
    logits = log_probs / temperature
    k = tf.where(top_k > 0, tf.minimum(top_k, vocab), vocab)

    def keep_top_k():
        kth_best = tf.math.top_k(logits, k)[0][:, -1:]
        return tf.where(logits < kth_best, NEG_INF, logits)

    logits = tf.cond(top_k > 0, keep_top_k, lambda: logits)
    probs = tf.nn.softmax(logits, axis=-1)
    probs = tf.cond(top_p < 1, lambda: nucleus(probs, top_p, k), lambda: probs)
    cumulative = tf.cumsum(probs, axis=-1)
    threshold = uniform[:, None] * cumulative[:, -1:]
    tokens = tf.reduce_sum(tf.cast(cumulative <= threshold, tf.int32), axis=-1)
    tokens = tf.minimum(tokens, vocab - 1)
    chosen = tf.gather(probs, tokens[:, None], batch_dims=1)[:, 0]
    return tf.where(chosen > 0, tokens, tf.argmax(probs, axis=-1, output_type=tf.int32))


def sample_ids(model, source_ids, top_k, top_p, temperature, max_extra_length, seed):
    """`(ids [batch, length], log_probs [batch])` of one sample per source row."""
    _, buffer_length = max_output_lengths(
        source_ids, model.config.pad_id, max_extra_length, model.config.max_length
    )
    seed_pair = tf.stack([seed, tf.constant(0, tf.int64)])
    noise = tf.random.stateless_uniform([buffer_length, tf.shape(source_ids)[0]], seed_pair)

    def select(log_probs, step):
        return graph_sample_tokens(log_probs, noise[step], top_k, temperature, top_p)

    result = decode_token_by_token(model, source_ids, select, max_extra_length)
    return result.ids[:, 0], result.log_probs[:, 0]


def translate_sample(functions, top_k=0, top_p=1.0, temperature=1.0, seed=0):
    """The signature's function around a `ServingFunctions`; the settings' defaults (the
    SignatureDef's, filled in by TF Serving) are these and the export's `max_extra_length`.

    Outputs: `translation` `[batch]` string and `score` `[batch]` float32, the sample's
    log-probability (the sum over its tokens, eos included); "" and 0 for a blank text.
    """
    model = functions.model
    defaults = dict(
        top_k=tf.constant(top_k, tf.int32),
        top_p=tf.constant(top_p, tf.float32),
        temperature=tf.constant(temperature, tf.float32),
        max_extra_length=functions.defaults["max_extra_length"],
        seed=tf.constant(seed, tf.int64),
    )

    def translate_sample(
        text,
        top_k=defaults["top_k"],
        top_p=defaults["top_p"],
        temperature=defaults["temperature"],
        max_extra_length=defaults["max_extra_length"],
        seed=defaults["seed"],
    ):
        text = tf.reshape(tf.convert_to_tensor(text, tf.string), [-1])
        top_k, top_p, temperature, max_extra_length = check_sampling_settings(
            top_k, top_p, temperature, max_extra_length
        )
        source_ids = functions.encode(text)
        ids, log_probs = tf.cond(
            tf.shape(text)[0] > 0,
            lambda: sample_ids(
                model, source_ids, top_k, top_p, temperature, max_extra_length, seed
            ),
            lambda: (tf.zeros([0, 0], tf.int32), tf.zeros([0], tf.float32)),
        )
        blank = tf.equal(tf.strings.length(tf.strings.strip(text)), 0)
        return {
            "translation": tf.where(blank, "", functions.decode(ids)),
            "score": tf.where(blank, 0.0, log_probs),
        }

    return translate_sample
