"""The functions behind the exported signatures: tokenization, beam search, detokenization,
and the scoring of given translations (`score_pairs`)."""

import functools

import tensorflow as tf

from keras_transformer.decoding import BeamSearch
from keras_transformer.decoding.scoring import score_targets
from keras_transformer.decoding.settings import CHOICES, MESSAGE, MESSAGE_CHOICE, ranges


class ServingFunctions:
    """Builds the graph functions of the SavedModel around one model and its vocabulary.

    Args:
        model: a `Transformer`.
        vocabulary: its `SubwordVocabulary`, or an imported model's `MarianVocabulary`.
        max_beam_size: the widest beam compiled into the graph.
        beam_size, alpha, max_extra_length, length_penalty: defaults of the per-request
            settings (`length_penalty` "gnmt" or "power", a string input per request).
    """

    def __init__(
        self,
        model,
        vocabulary,
        max_beam_size,
        beam_size,
        alpha,
        max_extra_length,
        length_penalty="gnmt",
    ):
        self.model = model
        self.config = model.config
        self.max_beam_size = max_beam_size
        self.defaults = dict(
            beam_size=tf.constant(beam_size, tf.int32),
            alpha=tf.constant(alpha, tf.float32),
            max_extra_length=tf.constant(max_extra_length, tf.int32),
            num_hypotheses=tf.constant(1, tf.int32),
            length_penalty=tf.constant(length_penalty, tf.string),
        )
        # Each side's tokenization (one SentencePiece model, or OPUS-MT's two and id tables).
        self.sides = vocabulary.make_graph_tokenizer()
        # The tf.Module whose SentencePiece resources (and tables) the archive tracks and saves.
        self.tokenizer = getattr(self.sides, "tokenizer", self.sides)

    # -- signatures ---------------------------------------------------------------------------

    def _settings_signature(self):
        return [
            tf.TensorSpec([], tf.int32, name="beam_size"),
            tf.TensorSpec([], tf.float32, name="alpha"),
            tf.TensorSpec([], tf.int32, name="max_extra_length"),
            tf.TensorSpec([], tf.int32, name="num_hypotheses"),
            tf.TensorSpec([], tf.string, name="length_penalty"),
        ]

    def text_signature(self):
        return [tf.TensorSpec([None], tf.string, name="text"), *self._settings_signature()]

    def ids_signature(self):
        return [
            tf.TensorSpec([None, None], tf.int32, name="source_ids"),
            *self._settings_signature(),
        ]

    def translate_text(self, translate_ids):
        """`serving_default`: text in, text out, through `translate_ids` (the endpoint's
        traced function), so that the search, one branch per beam width and most of an export's
        time, is traced and stored once rather than once per signature."""
        d = self.defaults

        def translate_text(
            text,
            beam_size=d["beam_size"],
            alpha=d["alpha"],
            max_extra_length=d["max_extra_length"],
            num_hypotheses=d["num_hypotheses"],
            length_penalty=d["length_penalty"],
        ):
            settings = (beam_size, alpha, max_extra_length, num_hypotheses, length_penalty)
            return self._translate_text(translate_ids, text, *settings)

        return translate_text

    def ids_prefix_signature(self):
        return [
            tf.TensorSpec([None, None], tf.int32, name="source_ids"),
            tf.TensorSpec([None, None], tf.int32, name="prefix_ids"),
            *self._settings_signature(),
        ]

    @property
    def translate_ids_with_prefix(self):
        """`translate_ids_with_prefix`: the search, the one copy in the graph that the other
        signatures call. `prefix_ids` `[batch, length]`: target ids every hypothesis starts
        with, right-padded with pad (no eos; a row of pads or a width of 0: no prefix)."""
        d = self.defaults

        def translate_ids_with_prefix(
            source_ids,
            prefix_ids,
            beam_size=d["beam_size"],
            alpha=d["alpha"],
            max_extra_length=d["max_extra_length"],
            num_hypotheses=d["num_hypotheses"],
            length_penalty=d["length_penalty"],
        ):
            settings = (beam_size, alpha, max_extra_length, num_hypotheses, length_penalty)
            ids, lengths, scores = self._search(source_ids, *settings, prefix_ids)
            return {"output_ids": ids, "output_lengths": lengths, "scores": scores}

        return translate_ids_with_prefix

    def translate_ids(self, translate_ids_with_prefix):
        """`translate_ids`: `translate_ids_with_prefix` (the endpoint's traced function) with no
        prefix, which forces nothing: the outputs are those of a search without one."""
        d = self.defaults

        def translate_ids(
            source_ids,
            beam_size=d["beam_size"],
            alpha=d["alpha"],
            max_extra_length=d["max_extra_length"],
            num_hypotheses=d["num_hypotheses"],
            length_penalty=d["length_penalty"],
        ):
            no_prefix = tf.zeros([tf.shape(source_ids)[0], 0], tf.int32)
            settings = (beam_size, alpha, max_extra_length, num_hypotheses, length_penalty)
            return translate_ids_with_prefix(source_ids, no_prefix, *settings)

        return translate_ids

    def prefix_signature(self):
        return [
            tf.TensorSpec([None], tf.string, name="text"),
            tf.TensorSpec([None], tf.string, name="target_prefix"),
            *self._settings_signature(),
        ]

    def translate_with_prefix(self, translate_ids_with_prefix):
        """`translate_with_prefix`: `serving_default` with a `target_prefix` per text ("" for
        none) that every hypothesis starts with (`keras_transformer.decoding.prefix`), through
        `translate_ids_with_prefix` (the endpoint's traced function). A signature of its own: TF
        Serving's REST API needs every input of a signature, so an input added to
        `serving_default` would break the requests that leave it out."""
        d = self.defaults

        def translate_with_prefix(
            text,
            target_prefix,
            beam_size=d["beam_size"],
            alpha=d["alpha"],
            max_extra_length=d["max_extra_length"],
            num_hypotheses=d["num_hypotheses"],
            length_penalty=d["length_penalty"],
        ):
            text = tf.reshape(tf.convert_to_tensor(text, tf.string), [-1])
            target_prefix = tf.reshape(tf.convert_to_tensor(target_prefix, tf.string), [-1])
            same_size = tf.debugging.assert_equal(
                tf.shape(text),
                tf.shape(target_prefix),
                message="translate_with_prefix needs one target_prefix per text",
            )
            with tf.control_dependencies([same_size]):
                prefix_ids = self.encode_prefix(target_prefix)
            settings = (beam_size, alpha, max_extra_length, num_hypotheses, length_penalty)
            found = translate_ids_with_prefix(self.encode(text), prefix_ids, *settings)
            return self._text_outputs(text, found["output_ids"], found["scores"])

        return translate_with_prefix

    def pair_signature(self):
        return [
            tf.TensorSpec([None], tf.string, name="source"),
            tf.TensorSpec([None], tf.string, name="target"),
        ]

    def score_pairs(self, source, target):
        """`score_pairs`: log P(target | source) per pair by teacher forcing, as
        `Translator.score` (the sum over the target's tokens, eos included). A target longer
        than the model's `max_length` tokens fails the request: truncating it would score
        another sentence."""
        source = tf.reshape(tf.convert_to_tensor(source, tf.string), [-1])
        target = tf.reshape(tf.convert_to_tensor(target, tf.string), [-1])
        same_size = tf.debugging.assert_equal(
            tf.shape(source), tf.shape(target), message="score_pairs needs one target per source"
        )
        with tf.control_dependencies([same_size]):
            target_ids = self.encode_target(target)
        source_ids = self.encode(source)

        def scores():
            return score_targets(self.model, source_ids, target_ids)[0]

        score = tf.cond(tf.shape(source)[0] > 0, scores, lambda: tf.zeros([0], tf.float32))
        return {"score": score}

    def text_only(self, serving_default):
        """`translate(text)`: `serving_default` with the export's default settings."""

        def translate(text):
            return serving_default(text, **self.defaults)

        return translate

    # -- pieces -------------------------------------------------------------------------------

    def encode(self, text):
        """`[batch]` strings -> `[batch, length]` source ids: pieces, eos, then pad.

        Sources longer than the model's `max_length` are truncated (keeping room for eos),
        as `translate()` does.
        """
        pieces = self.sides.tokenize_source(text)[:, : self.config.max_length - 1]
        eos = tf.fill([tf.shape(text)[0], 1], self.config.eos_id)
        with_eos = tf.concat([pieces, tf.RaggedTensor.from_tensor(eos)], axis=1)
        return with_eos.to_tensor(default_value=self.config.pad_id)

    def encode_prefix(self, text):
        """`[batch]` strings -> `[batch, length]` target prefix ids: pieces, then pad (no eos);
        "" gives a row of pads, no prefix. A prefix is cut at the output length cap."""
        pieces = self.sides.tokenize_target(text)[:, : self.config.max_length - 1]
        return pieces.to_tensor(default_value=self.config.pad_id)

    def encode_target(self, text):
        """`[batch]` strings -> `[batch, length]` labels: pieces, eos, then pad; a target of
        more than `max_length` tokens (eos included) fails with InvalidArgument."""
        pieces = self.sides.tokenize_target(text)
        eos = tf.fill([tf.shape(text)[0], 1], self.config.eos_id)
        with_eos = tf.concat([pieces, tf.RaggedTensor.from_tensor(eos)], axis=1)
        lengths = with_eos.row_lengths()
        longest = tf.reduce_max(tf.concat([lengths, tf.zeros([1], lengths.dtype)], 0))
        fits = tf.debugging.Assert(
            longest <= self.config.max_length,
            [
                tf.strings.format(
                    "a target has {} tokens (eos included), more than the model's maximum "
                    "of {}; it cannot be scored whole",
                    [longest, self.config.max_length],
                )
            ],
        )
        with tf.control_dependencies([fits]):
            return tf.identity(with_eos.to_tensor(default_value=self.config.pad_id))

    def decode(self, ids):
        """`[..., length]` output ids (eos-terminated, pad after) -> strings `[...]`."""
        shape = tf.shape(ids)
        flat = tf.reshape(ids, [tf.reduce_prod(shape[:-1]), shape[-1]])  # no -1: rows may be 0
        flat = tf.where(flat == self.config.eos_id, self.config.pad_id, flat)
        text = self.sides.detokenize_target(
            tf.RaggedTensor.from_tensor(flat, padding=self.config.pad_id)
        )
        return tf.reshape(text, shape[:-1])

    def check_settings(self, beam_size, alpha, max_extra_length, num_hypotheses, length_penalty):
        """The settings, after asserts of `check_decoding_settings`' ranges and choices: a
        request outside them fails with InvalidArgument and the same message as
        `translate()`'s error. `length_penalty` comes back as a boolean, True for "power"."""
        values = {
            "beam_size": beam_size,
            "alpha": alpha,
            "max_extra_length": max_extra_length,
            "num_hypotheses": num_hypotheses,
        }
        bounds = ranges(self.max_beam_size, beam_size)
        checks = []
        for name, value in values.items():
            kind, low, high = bounds[name]
            dynamic = tf.is_tensor(high)
            template = MESSAGE.format(
                name=name, value="{}", kind=kind, low=low, high="{}" if dynamic else high
            )
            valid = tf.logical_and(value >= low, value <= high)
            if value.dtype.is_floating:
                valid = tf.logical_and(valid, tf.math.is_finite(value))  # as the Python rule
            message = tf.strings.format(template, [value, high] if dynamic else [value])
            checks.append(tf.debugging.Assert(valid, [message]))
        choices = CHOICES["length_penalty"]
        known = tf.reduce_any(tf.equal(length_penalty, tf.constant(choices)))
        # Joined, not tf.strings.format, which would quote the string.
        before, after = MESSAGE_CHOICE.format(
            name="length_penalty", value="\0", choices=", ".join(choices)
        ).split("\0")
        message = tf.strings.join([before, length_penalty, after])
        checks.append(tf.debugging.Assert(known, [message]))
        with tf.control_dependencies(checks):
            power = tf.equal(length_penalty, "power")
            return [tf.identity(value) for value in (*values.values(), power)]

    def _search(
        self,
        source_ids,
        beam_size,
        alpha,
        max_extra_length,
        num_hypotheses,
        length_penalty,
        prefix_ids=None,
    ):
        source_ids = tf.convert_to_tensor(source_ids, tf.int32)
        beam_size, alpha, max_extra_length, num_hypotheses, power = self.check_settings(
            beam_size, alpha, max_extra_length, num_hypotheses, length_penalty
        )

        def run(width):
            # The request's num_hypotheses, not the width: the early exit waits for that many
            # finished hypotheses (docs/decisions.md#exit-at-the-requested-n-best).
            result = BeamSearch(
                beam_size=width,
                alpha=alpha,
                max_extra_length=max_extra_length,
                num_hypotheses=num_hypotheses,
                length_penalty=power,
            )(self.model, source_ids, prefix_ids)
            # Pad the hypothesis axis to the widest beam: every branch has one shape.
            missing = self.max_beam_size - tf.shape(result.ids)[1]
            ids = tf.pad(
                result.ids, [[0, 0], [0, missing], [0, 0]], constant_values=self.config.pad_id
            )
            lengths = tf.pad(result.lengths, [[0, 0], [0, missing]])
            scores = tf.pad(result.scores, [[0, 0], [0, missing]], constant_values=-1e9)
            return ids, lengths, scores

        def empty():
            return (
                tf.zeros([0, self.max_beam_size, 0], tf.int32),
                tf.zeros([0, self.max_beam_size], tf.int32),
                tf.zeros([0, self.max_beam_size], tf.float32),
            )

        # Beam width is a shape: one compiled search per width, picked per request.
        branches = [functools.partial(run, width) for width in range(1, self.max_beam_size + 1)]
        ids, lengths, scores = tf.cond(
            tf.shape(source_ids)[0] > 0, lambda: tf.switch_case(beam_size - 1, branches), empty
        )
        return ids[:, :num_hypotheses], lengths[:, :num_hypotheses], scores[:, :num_hypotheses]

    def _translate_text(self, translate_ids, text, *settings):
        text = tf.reshape(tf.convert_to_tensor(text, tf.string), [-1])
        found = translate_ids(self.encode(text), *settings)
        return self._text_outputs(text, found["output_ids"], found["scores"])

    def _text_outputs(self, text, ids, scores):
        """The text signatures' outputs for `text` `[batch]` and its hypotheses' ids."""
        translations = self.decode(ids)
        # Empty or blank input translates to empty output, as translate() does.
        blank = tf.equal(tf.strings.length(tf.strings.strip(text)), 0)
        translations = tf.where(blank[:, None], tf.constant(""), translations)
        scores = tf.where(blank[:, None], 0.0, scores)
        return {
            "translation": translations[:, 0],
            "score": scores[:, 0],
            "nbest_translations": translations,
            "nbest_scores": scores,
        }
