"""Incremental decoding over the cache gives the logits of full recomputation at every step."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer.decoding import BeamSearch, IncrementalDecoder, as_decoder, greedy_search
from keras_transformer.decoding.incremental import NEG_INF, cache_lengths, forbid_tokens
from tests._decoding_fixtures import BOS, EOS, PAD, MarkovDecoder, full_log_probs, tiny_model


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


def test_cache_lengths_double_from_64_up_to_the_buffer():
    decoder = IncrementalDecoder(tiny_model(max_length=300))
    assert cache_lengths(decoder, 10) == [10]
    assert cache_lengths(decoder, 64) == [64]
    assert cache_lengths(decoder, 100) == [64, 100]
    assert cache_lengths(decoder, 256) == [64, 128, 256]
    # A tensor buffer (an exported graph) runs segments up to the model's max_length, each
    # capped at the buffer.
    lengths = cache_lengths(decoder, ops.convert_to_tensor(100))
    # 64, 128, 256, 300 (max_length), each capped at 100
    assert [int(ops.convert_to_numpy(length)) for length in lengths] == [64, 100, 100, 100]
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


def _start_token_pair():
    """Two models that decode alike: `from_bos` (pad 0, bos 2, eos 3) and `from_pad`, which
    starts decoding from pad (bos = pad = 0, as OPUS-MT) and holds `from_bos`'s bos embedding
    in its pad row. Token 2 is an ordinary token to `from_pad`: an output bias of -1e4 takes
    its probability, as one on pad does in `from_bos`, so that both normalise alike; one of
    -3 on eos makes outputs longer than eos alone."""
    from keras_transformer import TransformerConfig, build_model

    keras.utils.set_random_seed(8)
    config = TransformerConfig(
        vocab_size=13, num_layers=2, d_model=32, d_ff=64, num_heads=4, max_length=24
    )
    config = config.replace(dropout=0.0, output_bias=True)
    from_bos = build_model(config)
    from_pad = build_model(config.replace(bos_id=PAD))
    from_pad.set_weights(from_bos.get_weights())
    embeddings = 2.0 * ops.convert_to_numpy(from_bos.target_embedding.embeddings)  # peaky
    from_bos.target_embedding.embeddings.assign(embeddings)
    embeddings[PAD] = embeddings[BOS]
    from_pad.target_embedding.embeddings.assign(embeddings)
    bias = np.where(np.arange(13) == EOS, -3.0, 0.0)  # outputs longer than eos alone
    from_bos.output_bias.assign(np.where(np.arange(13) == PAD, -1e4, bias))
    from_pad.output_bias.assign(np.where(np.arange(13) == BOS, -1e4, bias))
    return from_bos, from_pad


START_SOURCES = np.array([[5, 6, 7, 8, EOS], [9, 10, EOS, PAD, PAD], [11, 4, 12, EOS, PAD]])


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_decoding_from_pad_gives_the_outputs_of_decoding_from_bos(search):
    from_bos, from_pad = _start_token_pair()
    if search == "beam":
        run = BeamSearch(beam_size=3, alpha=0.6, max_extra_length=6, num_hypotheses=3)
    else:

        def run(model, source):
            return greedy_search(model, source, max_extra_length=6)

    source_ids = ops.convert_to_tensor(START_SOURCES.astype("int32"))
    expected, found = run(from_bos, source_ids), run(from_pad, source_ids)
    ids, lengths = ops.convert_to_numpy(found.ids), ops.convert_to_numpy(found.lengths)
    np.testing.assert_array_equal(ids, ops.convert_to_numpy(expected.ids))
    np.testing.assert_allclose(
        ops.convert_to_numpy(found.scores), ops.convert_to_numpy(expected.scores), atol=1e-5
    )
    assert lengths.min() >= 2  # the sentences decode more than eos alone
    for row, hypotheses in zip(ids, lengths):
        for hypothesis, length in zip(row, hypotheses):
            assert PAD not in hypothesis[:length].tolist()  # pad is also the start token


def test_decoding_from_pad_steps_match_full_recomputation():
    _, from_pad = _start_token_pair()
    rng = np.random.default_rng(2)
    target_inputs = np.concatenate(
        [np.full((3, 1), PAD), rng.integers(3, 13, size=(3, 6))], axis=1
    ).astype("int32")
    source_ids = START_SOURCES.astype("int32")
    _assert_steps_match_full_recomputation(
        IncrementalDecoder(from_pad), source_ids, target_inputs, 7
    )


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_searches_never_emit_the_start_token_when_it_is_pad(search):
    # From the start token (pad), the model's favourite next token is pad itself.
    table = np.log(np.full((6, 6), 0.05, "float32"))
    table[PAD] = np.log([0.8, 0.05, 0.05, 0.05, 0.03, 0.02])
    table[:, EOS] = np.log(0.5)
    decoder = MarkovDecoder(table)
    decoder.bos_id = PAD
    source_ids = ops.convert_to_tensor(np.array([[4, 5, EOS]], "int32"))
    if search == "beam":
        result = BeamSearch(beam_size=2, alpha=0.0, max_extra_length=2)(decoder, source_ids)
    else:
        result = greedy_search(decoder, source_ids, max_extra_length=2)
    assert ops.convert_to_numpy(result.ids)[0, 0, 0] == EOS
