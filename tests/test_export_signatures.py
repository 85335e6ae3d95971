"""The exported search (`keras_transformer.export.signatures`) on a scripted decoder: what a
request's settings make it do, step by step."""

import math
import types

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.export.signatures import ServingFunctions
from tests._decoding_fixtures import (
    EOS,
    PAD,
    RowCountingDecoder,
    power_prefers_longer_table,
    second_hypothesis_later_table,
)


class ScriptedModel(RowCountingDecoder):
    """The scripted decoder with the model attributes the serving functions read."""

    config = types.SimpleNamespace(pad_id=PAD)


class NoVocabulary:
    """The serving functions' vocabulary, for searches over ids only (no text)."""

    def make_graph_tokenizer(self):
        return None


@pytest.mark.parametrize("num_hypotheses, steps", [(1, 2), (2, 6)])
def test_the_exported_search_exits_once_the_requested_hypotheses_are_final(num_hypotheses, steps):
    # The graph compiles one search per beam width; the request's n-best, not the width,
    # decides when it stops (the table's best output is final after step 1, the second
    # best after step 5).
    model = ScriptedModel(second_hypothesis_later_table())
    functions = ServingFunctions(
        model, NoVocabulary(), max_beam_size=3, beam_size=2, alpha=0.0, max_extra_length=20
    )
    translate_ids = functions.translate_ids(functions.translate_ids_with_prefix)
    found = translate_ids(
        tf.constant([[6, EOS]]),
        beam_size=tf.constant(2),
        num_hypotheses=tf.constant(num_hypotheses),
    )
    assert len(model.rows) == steps
    assert found["output_ids"].shape[1] == num_hypotheses
    assert found["output_ids"].numpy()[0, 0, :2].tolist() == [4, EOS]
    np.testing.assert_allclose(found["scores"].numpy()[0, 0], np.log(0.99 * 0.9), atol=1e-6)


def test_each_request_chooses_its_length_penalty():
    # power_prefers_longer_table: at alpha 1, "4 eos" wins under "gnmt", "6 7 eos" under
    # "power" (tests/test_beam_search.py works both out by hand); an unknown form fails.
    model = ScriptedModel(power_prefers_longer_table())
    functions = ServingFunctions(
        model, NoVocabulary(), max_beam_size=2, beam_size=2, alpha=1.0, max_extra_length=5
    )
    translate_ids = functions.translate_ids(functions.translate_ids_with_prefix)
    source = tf.constant([[4, 4, 4, 4, EOS]])
    short, long = math.log(0.55) + math.log(0.99), math.log(0.45) + 2 * math.log(0.999)
    expected = {"gnmt": ([4, EOS], short / (7 / 6)), "power": ([6, 7, EOS], long / 3)}
    for form, (ids, score) in expected.items():
        found = translate_ids(source, length_penalty=tf.constant(form))
        assert found["output_ids"].numpy()[0, 0, : len(ids)].tolist() == ids
        np.testing.assert_allclose(found["scores"].numpy()[0, 0], score, atol=1e-5)
    assert translate_ids(source)["output_ids"].numpy()[0, 0, :2].tolist() == [4, EOS]  # default
    message = "length_penalty=linear is not a choice: it must be one of gnmt, power"
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        translate_ids(source, length_penalty=tf.constant("linear"))
