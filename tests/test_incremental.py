"""Incremental decoding over the cache gives the logits of full recomputation at every step."""

import numpy as np
import pytest
from keras import ops

from keras_transformer.decoding import BeamSearch, IncrementalDecoder, as_decoder, greedy_search
from keras_transformer.decoding.incremental import NEG_INF, cache_lengths, forbid_tokens
from tests._decoding_fixtures import BOS, EOS, MarkovDecoder, full_log_probs, tiny_model


@pytest.mark.parametrize("changes", [{}, {"norm_position": "pre"}, {"output_bias": True}])
def test_cached_steps_match_full_recomputation(changes):
    model = tiny_model(vocab_size=13, max_length=12, seed=3, num_layers=2)
    if changes:
        from keras_transformer import build_model

        model = build_model(model.config.replace(**changes))
    if model.output_bias is not None:  # zeros at first: make it matter
        model.output_bias.assign(3.0 * np.random.default_rng(1).normal(size=13))
    decoder = IncrementalDecoder(model)
    rng = np.random.default_rng(0)
    source_ids = np.array([[5, 6, 7, 8, EOS], [9, 10, EOS, 0, 0]], "int32")
    target_inputs = np.concatenate(
        [np.full((2, 1), BOS), rng.integers(4, 13, size=(2, 8))], axis=1
    ).astype("int32")

    _assert_steps_match_full_recomputation(decoder, source_ids, target_inputs, 10)


def _assert_steps_match_full_recomputation(
    decoder, source_ids, target_inputs, cache_length, growth=None
):
    """Steps the decoder through `target_inputs` (lengthening its caches before the steps
    in `growth`, `{step: new length}`) and compares each step with the full forward pass."""
    expected = full_log_probs(decoder.model, source_ids, target_inputs)
    static, dynamic = decoder.initial_state(ops.convert_to_tensor(source_ids), cache_length)
    for step in range(target_inputs.shape[1]):
        if growth and step in growth:
            dynamic = decoder.grow_state(dynamic, growth[step])
            keys = ops.convert_to_numpy(dynamic[0][0])
            assert keys.shape[2] == growth[step] and not keys[:, :, step:].any()
        log_probs, dynamic = decoder.step(
            ops.convert_to_tensor(target_inputs[:, step : step + 1]), static, dynamic, step
        )
        log_probs = np.asarray(ops.convert_to_numpy(log_probs), np.float64)
        real = np.isfinite(expected[:, step])
        np.testing.assert_allclose(
            log_probs[real], expected[:, step][real], atol=1e-5, err_msg=f"step {step}"
        )


def test_forbid_tokens_sets_pad_and_bos_to_neg_inf_and_keeps_the_rest():
    log_probs = ops.convert_to_tensor(np.log(np.full((2, 5), 0.2, "float32")))
    out = ops.convert_to_numpy(forbid_tokens(log_probs, (0, 2)))
    assert (out[:, [0, 2]] == NEG_INF).all()
    np.testing.assert_allclose(out[:, [1, 3, 4]], np.log(0.2), rtol=1e-6)


def test_as_decoder_rejects_other_objects():
    with pytest.raises(TypeError, match="str"):
        as_decoder("model.keras")


def test_cache_lengths_double_from_16_up_to_the_buffer():
    decoder = IncrementalDecoder(tiny_model(max_length=100))
    assert cache_lengths(decoder, 10) == [10]
    assert cache_lengths(decoder, 16) == [16]
    assert cache_lengths(decoder, 40) == [16, 32, 40]
    assert cache_lengths(decoder, 64) == [16, 32, 64]
    # A tensor buffer (an exported graph) runs segments up to the model's max_length, each
    # capped at the buffer.
    lengths = cache_lengths(decoder, ops.convert_to_tensor(40))
    # 16, 32, 64, 100 (max_length), each capped at 40
    assert [int(ops.convert_to_numpy(length)) for length in lengths] == [16, 32, 40, 40]
    # A decoder that cannot grow its caches decodes in one segment.
    assert cache_lengths(MarkovDecoder(np.zeros((5, 5))), 40) == [40]


def test_grown_caches_give_the_logits_of_full_recomputation():
    model = tiny_model(vocab_size=13, max_length=12, seed=4, num_layers=2)
    decoder = IncrementalDecoder(model)
    rng = np.random.default_rng(1)
    source_ids = np.array([[5, 6, 7, EOS], [9, EOS, 0, 0]], "int32")
    target_inputs = np.concatenate(
        [np.full((2, 1), BOS), rng.integers(4, 13, size=(2, 8))], axis=1
    ).astype("int32")
    # Before step 3, lengthen the caches to 5 slots; before step 5, to 9.
    _assert_steps_match_full_recomputation(
        decoder, source_ids, target_inputs, 3, growth={3: 5, 5: 9}
    )


class _FixedCacheDecoder:
    """The decoder of a model without `grow_state`: caches as long as the longest output."""

    def __init__(self, model):
        self._decoder = IncrementalDecoder(model)
        for name in ("vocab_size", "pad_id", "bos_id", "eos_id", "max_length", "variables"):
            setattr(self, name, getattr(self._decoder, name))
        self.initial_state, self.step = self._decoder.initial_state, self._decoder.step


@pytest.mark.parametrize("search", ["beam", "greedy"])
def test_growing_caches_decode_as_one_fixed_cache(search):
    # 40 forced steps run three segments (caches of 16, 32 and 40 slots).
    model = tiny_model(vocab_size=17, max_length=64, seed=5, sharpen=3.0)
    source_ids = ops.convert_to_tensor(
        np.array([[5, 6, 7, 8, 9, EOS], [10, 11, EOS, 0, 0, 0]], "int32")
    )
    if search == "beam":
        run = BeamSearch(
            beam_size=3, alpha=0.6, max_extra_length=34, min_length=40, num_hypotheses=3
        )
    else:

        def run(decoder, source):
            return greedy_search(decoder, source, max_extra_length=34, min_length=40)

    grown = run(IncrementalDecoder(model), source_ids)
    fixed = run(_FixedCacheDecoder(model), source_ids)
    assert int(ops.convert_to_numpy(grown.lengths).max()) == 40
    np.testing.assert_array_equal(ops.convert_to_numpy(grown.ids), ops.convert_to_numpy(fixed.ids))
    np.testing.assert_allclose(
        ops.convert_to_numpy(grown.scores), ops.convert_to_numpy(fixed.scores), atol=1e-4
    )


def test_growing_caches_with_a_buffer_known_only_at_run_time():
    # An exported graph's search: any source length, max_extra_length per request.
    tf = pytest.importorskip("tensorflow")
    import keras

    if keras.backend.backend() != "tensorflow":
        pytest.skip("tf.function tracing is a TensorFlow-backend feature")
    model = tiny_model(vocab_size=17, max_length=48, seed=6, sharpen=3.0)
    source_ids = np.array([[5, 6, 7, 8, 9, EOS], [10, 11, EOS, 0, 0, 0]], "int32")

    @tf.function(
        input_signature=[tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([], tf.int32)]
    )
    def search(source, max_extra_length):
        result = BeamSearch(
            beam_size=2, alpha=0.6, max_extra_length=max_extra_length, min_length=30
        )(model, source)
        return result.ids, result.scores

    eager = BeamSearch(beam_size=2, alpha=0.6, max_extra_length=24, min_length=30)(
        model, ops.convert_to_tensor(source_ids)
    )
    ids, scores = search(source_ids, tf.constant(24))
    np.testing.assert_array_equal(ids.numpy(), ops.convert_to_numpy(eager.ids))
    np.testing.assert_allclose(scores.numpy(), ops.convert_to_numpy(eager.scores), atol=1e-4)
