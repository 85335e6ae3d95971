"""The SavedModel's `translate_with_alignments` signature: the best translation of each text
and its word alignment as a Pharaoh string ("0-0 2-1 1-2"), computed in the graph with the
pooling of `keras_transformer.decoding.alignment` (one teacher-forced pass over the search's
own output, which sees the attention the search saw).

A signature of its own: a SignatureDef has no optional outputs, and TF Serving's REST API
needs every input of the signature it calls, so `serving_default` stays as it is.
"""

import tensorflow as tf

from keras_transformer.decoding import alignment


def alignment_signature():
    """Inputs: `text` `[batch]` string and the search settings of `serving_default` (one
    hypothesis per text: an alignment belongs to one translation)."""
    return [
        tf.TensorSpec([None], tf.string, name="text"),
        tf.TensorSpec([], tf.int32, name="beam_size"),
        tf.TensorSpec([], tf.float32, name="alpha"),
        tf.TensorSpec([], tf.int32, name="max_extra_length"),
    ]


def pharaoh_strings(source_word, valid):
    """`[batch]` strings "i-j ..." from `word_alignment`'s `(source_word, valid)`."""
    target_word = tf.broadcast_to(tf.range(tf.shape(source_word)[1])[None], tf.shape(source_word))
    links = tf.strings.join(
        [tf.strings.as_string(source_word), tf.strings.as_string(target_word)], separator="-"
    )
    return tf.strings.reduce_join(tf.ragged.boolean_mask(links, valid), axis=1, separator=" ")


def graph_alignments(model, classes, source_ids, target_ids):
    """Pharaoh strings `[batch]` for given source and target ids (pieces, eos, pad)."""
    return pharaoh_strings(*alignment.aligned_words(model, classes, source_ids, target_ids))


def translate_with_alignments(functions, translate_ids, classes):
    """The signature's function, around a `ServingFunctions` and the exported
    `translate_ids` endpoint (one copy of the search in the graph).

    Args:
        functions: the export's `ServingFunctions`.
        translate_ids: the `translate_ids` endpoint.
        classes: `alignment.piece_classes(vocabulary, vocab_size)`.

    Outputs: `translation` `[batch]` string, `score` `[batch]` float32 (as
    `serving_default`'s), `alignment` `[batch]` string; "", 0 and "" for a blank text.
    """
    defaults = functions.defaults
    classes = tf.constant(classes, tf.int32)

    def translate_with_alignments(
        text,
        beam_size=defaults["beam_size"],
        alpha=defaults["alpha"],
        max_extra_length=defaults["max_extra_length"],
    ):
        text = tf.reshape(tf.convert_to_tensor(text, tf.string), [-1])
        source_ids = functions.encode(text)
        one = tf.constant(1, tf.int32)
        # The export's default length penalty: this signature takes no per-request one.
        penalty = defaults["length_penalty"]
        found = translate_ids(source_ids, beam_size, alpha, max_extra_length, one, penalty)
        ids, score = found["output_ids"][:, 0], found["scores"][:, 0]
        links = tf.cond(
            tf.shape(text)[0] > 0,
            lambda: graph_alignments(functions.model, classes, source_ids, ids),
            lambda: tf.zeros([0], tf.string),
        )
        blank = tf.equal(tf.strings.length(tf.strings.strip(text)), 0)
        return {
            "translation": tf.where(blank, "", functions.decode(ids)),
            "score": tf.where(blank, 0.0, score),
            "alignment": tf.where(blank, "", links),
        }

    return translate_with_alignments
