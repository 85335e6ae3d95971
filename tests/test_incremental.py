"""Incremental decoding over the cache gives the logits of full recomputation at every step."""

import numpy as np
import pytest
from keras import ops

from tests._decoding_fixtures import BOS, EOS, full_log_probs, tiny_model
from keras_transformer.decoding import IncrementalDecoder, as_decoder
from keras_transformer.decoding.incremental import NEG_INF, forbid_tokens


@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_cached_steps_match_full_recomputation(norm_position):
    model = tiny_model(vocab_size=13, max_length=12, seed=3, num_layers=2)
    if norm_position == "pre":
        from keras_transformer import TransformerConfig, build_model
        model = build_model(TransformerConfig(**{**model.config.to_dict(),
                                                 "norm_position": "pre"}))
    decoder = IncrementalDecoder(model)
    rng = np.random.default_rng(0)
    source_ids = np.array([[5, 6, 7, 8, EOS], [9, 10, EOS, 0, 0]], "int32")
    target_inputs = np.concatenate(
        [np.full((2, 1), BOS), rng.integers(4, 13, size=(2, 8))], axis=1).astype("int32")

    expected = full_log_probs(model, source_ids, target_inputs)
    static, dynamic = decoder.initial_state(ops.convert_to_tensor(source_ids), 10)
    for step in range(target_inputs.shape[1]):
        log_probs, dynamic = decoder.step(
            ops.convert_to_tensor(target_inputs[:, step:step + 1]), static, dynamic, step)
        log_probs = np.asarray(ops.convert_to_numpy(log_probs), np.float64)
        real = np.isfinite(expected[:, step])
        np.testing.assert_allclose(log_probs[real], expected[:, step][real], atol=1e-5,
                                   err_msg=f"step {step}")


def test_forbid_tokens_sets_pad_and_bos_to_neg_inf_and_keeps_the_rest():
    log_probs = ops.convert_to_tensor(np.log(np.full((2, 5), 0.2, "float32")))
    out = ops.convert_to_numpy(forbid_tokens(log_probs, (0, 2)))
    assert (out[:, [0, 2]] == NEG_INF).all()
    np.testing.assert_allclose(out[:, [1, 3, 4]], np.log(0.2), rtol=1e-6)


def test_as_decoder_rejects_other_objects():
    with pytest.raises(TypeError, match="str"):
        as_decoder("model.keras")
