"""sample(): the token frequencies of many draws against softmax(log_probs / temperature),
restricted to the top k, over a decoder whose next-token distribution is fixed."""

import numpy as np
import pytest
from keras import ops
from scipy.stats import chi2

from keras_transformer.decoding.sampling import sample, sample_tokens
from tests._decoding_fixtures import BOS, EOS, UNK, MarkovDecoder, markov_table

# The first output token's distribution (after bos); pad and bos are never emitted.
FIRST_TOKEN = {UNK: 0.05, EOS: 0.10, 4: 0.30, 5: 0.25, 6: 0.20, 7: 0.10}
VOCAB_SIZE = 8
DRAWS = 20000
# chi-square critical values at this level: a correct sampler fails with probability 1e-6
# (and with the fixed seeds below, never); a wrong distribution gives statistics in the
# hundreds at 20000 draws (see test_the_check_rejects_a_wrong_temperature).
ALPHA = 1e-6


def first_tokens(top_k=0, temperature=1.0, seed=0):
    """The first output token of DRAWS one-token sentences, each sampled independently."""
    decoder = MarkovDecoder(markov_table(VOCAB_SIZE, {BOS: FIRST_TOKEN}))
    # Source [eos] with no extra length: outputs are one token long, drawn after bos.
    sources = np.full((DRAWS, 1), EOS, "int32")
    result = sample(
        decoder, sources, top_k=top_k, temperature=temperature, max_extra_length=0, seed=seed
    )
    return ops.convert_to_numpy(result.ids)[:, 0, 0]


def expected_frequencies(temperature, top_k=0):
    """softmax(log p / T) over the tokens FIRST_TOKEN lists (NumPy, independent of the
    sampler): p^(1/T), renormalized, with all but the top_k most probable set to 0."""
    tokens = np.array(list(FIRST_TOKEN))
    probs = np.array(list(FIRST_TOKEN.values())) ** (1.0 / temperature)
    if top_k:
        probs[np.argsort(-probs)[top_k:]] = 0.0
    expected = np.zeros(VOCAB_SIZE)
    expected[tokens] = probs / probs.sum()
    return expected


def chi_square(tokens, expected):
    """Pearson's statistic of the observed token counts and its critical value at ALPHA;
    a draw of a token with expected probability 0 fails at once."""
    counts = np.bincount(tokens, minlength=VOCAB_SIZE)
    possible = expected > 0
    assert counts[~possible].sum() == 0, f"drew impossible tokens: {counts}"
    predicted = expected[possible] * len(tokens)
    statistic = float(((counts[possible] - predicted) ** 2 / predicted).sum())
    return statistic, float(chi2.ppf(1 - ALPHA, possible.sum() - 1))


@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
def test_frequencies_follow_softmax_of_log_probs_over_temperature(temperature):
    statistic, critical = chi_square(
        first_tokens(temperature=temperature, seed=1), expected_frequencies(temperature)
    )
    assert statistic < critical, (statistic, critical)


@pytest.mark.parametrize("top_k", [1, 3])
def test_top_k_draws_only_the_k_most_probable_tokens_in_proportion(top_k):
    tokens = first_tokens(top_k=top_k, temperature=0.8, seed=2)
    assert set(tokens.tolist()) <= set(sorted(FIRST_TOKEN, key=FIRST_TOKEN.get)[-top_k:])
    if top_k > 1:  # within the top k, still in proportion to p^(1/T)
        statistic, critical = chi_square(tokens, expected_frequencies(0.8, top_k))
        assert statistic < critical, (statistic, critical)


def test_the_check_rejects_a_wrong_temperature():
    # The test's power: draws at T = 1 are told apart from T = 0.8 by a wide margin (statistic ~290, critical value ~36).
    statistic, critical = chi_square(
        first_tokens(temperature=1.0, seed=3), expected_frequencies(0.8)
    )
    assert statistic > 5 * critical


def test_sample_tokens_inverts_the_cumulative_distribution():
    # probs [0.1, 0.2, 0.7]: cumulative [0.1, 0.3, 1.0]; u in [0, 0.1) -> 0, [0.1, 0.3) -> 1,
    # [0.3, 1) -> 2. With top_k 2, probs [0, 2/9, 7/9]: u < 2/9 -> 1, else 2.
    log_probs = ops.log(ops.convert_to_tensor([[0.1, 0.2, 0.7]] * 6, "float32"))
    uniform = ops.convert_to_tensor([0.0, 0.09, 0.11, 0.29, 0.31, 0.999], "float32")
    assert ops.convert_to_numpy(sample_tokens(log_probs, uniform)).tolist() == [0, 0, 1, 1, 2, 2]
    assert ops.convert_to_numpy(sample_tokens(log_probs, uniform, top_k=2)).tolist() == [
        1,
        1,
        1,
        2,
        2,
        2,
    ]


def test_bad_settings():
    decoder = MarkovDecoder(markov_table(VOCAB_SIZE, {}))
    with pytest.raises(ValueError, match="temperature must be > 0"):
        sample(decoder, np.array([[EOS]], "int32"), temperature=0.0)
    with pytest.raises(ValueError, match="top_k must be >= 0"):
        sample(decoder, np.array([[EOS]], "int32"), top_k=-1)
