"""sample(): the token frequencies of many draws against softmax(log_probs / temperature),
restricted to the top k and to the top-p nucleus, over a decoder whose next-token
distribution is fixed."""

import numpy as np
import pytest
from keras import ops
from scipy.stats import chi2

from keras_transformer.decoding.sampling import sample, sample_tokens
from keras_transformer.errors import UserInputError
from tests._decoding_fixtures import BOS, EOS, UNK, MarkovDecoder, markov_table

# The first output token's distribution (after bos); pad and bos are never emitted.
FIRST_TOKEN = {UNK: 0.05, EOS: 0.10, 4: 0.30, 5: 0.25, 6: 0.20, 7: 0.10}
VOCAB_SIZE = 8
DRAWS = 20000
# chi-square critical values at this level: a correct sampler fails with probability 1e-6
# (and with the fixed seeds below, never); a wrong distribution gives statistics in the
# hundreds at 20000 draws (see test_the_check_rejects_a_wrong_temperature).
ALPHA = 1e-6


def first_tokens(top_k=0, temperature=1.0, seed=0, top_p=1.0, first_token=None):
    """The first output token of DRAWS one-token sentences, each sampled independently."""
    decoder = MarkovDecoder(markov_table(VOCAB_SIZE, {BOS: first_token or FIRST_TOKEN}))
    # Source [eos] with no extra length: outputs are one token long, drawn after bos.
    sources = np.full((DRAWS, 1), EOS, "int32")
    result = sample(
        decoder,
        sources,
        top_k=top_k,
        temperature=temperature,
        max_extra_length=0,
        seed=seed,
        top_p=top_p,
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


# The nucleus test's distribution: top_p=0.8 keeps tokens 4 and 5 (0.5 + 0.3), and nothing of
# unk and eos (probability 1e-12 each).
NUCLEUS_FIRST_TOKEN = {4: 0.5, 5: 0.3, 6: 0.15, 7: 0.05}


def test_top_p_draws_only_the_nucleus_in_proportion():
    tokens = first_tokens(top_p=0.8, seed=4, first_token=NUCLEUS_FIRST_TOKEN)
    assert set(tokens.tolist()) == {4, 5}
    expected = np.zeros(VOCAB_SIZE)
    expected[[4, 5]] = [0.5 / 0.8, 0.3 / 0.8]
    statistic, critical = chi_square(tokens, expected)
    assert statistic < critical, (statistic, critical)


def test_top_p_1_is_plain_sampling_bit_for_bit():
    plain = first_tokens(seed=5, first_token=NUCLEUS_FIRST_TOKEN)
    with_top_p = first_tokens(seed=5, top_p=1.0, first_token=NUCLEUS_FIRST_TOKEN)
    np.testing.assert_array_equal(plain, with_top_p)
    # and not because the seed ignores the setting: a nucleus changes the draws
    assert not np.array_equal(
        plain, first_tokens(seed=5, top_p=0.8, first_token=NUCLEUS_FIRST_TOKEN)
    )


def test_sample_tokens_top_p_applies_after_temperature_and_top_k():
    # probs [0.1, 0.2, 0.7]. top_p 0.75: the mass before token 1 is 0.7 < 0.75, so the
    # nucleus is {2, 1}, renormalized [0, 2/9, 7/9]: u < 2/9 -> 1, else 2.
    log_probs = ops.log(ops.convert_to_tensor([[0.1, 0.2, 0.7]] * 6, "float32"))
    uniform = ops.convert_to_tensor([0.0, 0.09, 0.11, 0.29, 0.31, 0.999], "float32")

    def draws(**settings):
        return ops.convert_to_numpy(sample_tokens(log_probs, uniform, **settings)).tolist()

    assert draws(top_p=0.75) == [1, 1, 1, 2, 2, 2]
    # The mass before token 1 is 0.7, not below 0.7: the nucleus is token 2 alone.
    assert draws(top_p=0.7) == [2] * 6
    # A tiny top_p still keeps the most probable token.
    assert draws(top_p=1e-9) == [2] * 6
    # After top_k=2 the distribution is [0, 2/9, 7/9]: 7/9 > 0.75, so token 2 alone.
    assert draws(top_k=2, top_p=0.75) == [2] * 6
    # Temperature 0.5 first: p^2 renormalized is [0.019, 0.074, 0.907], and 0.907 > 0.9.
    assert draws(top_p=0.9) == [1, 1, 1, 2, 2, 2]
    assert draws(top_p=0.9, temperature=0.5) == [2] * 6


@pytest.mark.parametrize("top_p", [0.0, -0.1, 1.5, float("nan")])
def test_top_p_outside_its_range_is_one_error_with_the_range(top_p):
    decoder = MarkovDecoder(markov_table(VOCAB_SIZE, {}))
    with pytest.raises(UserInputError, match=r"top_p=.* must be a finite number in \(0.0, 1.0\]"):
        sample(decoder, np.array([[EOS]], "int32"), top_p=top_p)


class _OneTokenVocabulary:
    """Every text is token 4; ids decode to their numbers."""

    def encode(self, text):
        return [4]

    def decode(self, ids):
        return " ".join(str(i) for i in ids)


def test_translator_samples_from_the_nucleus():
    from keras_transformer.translation import Translator

    # One token, then eos: each translation is the first token drawn.
    rows = {BOS: NUCLEUS_FIRST_TOKEN, **{token: {EOS: 1.0} for token in NUCLEUS_FIRST_TOKEN}}
    decoder = MarkovDecoder(markov_table(VOCAB_SIZE, rows))
    options = dict(search="sample", max_extra_length=0, seed=6, batch_size=400)
    nucleus = Translator(decoder, _OneTokenVocabulary(), top_p=0.8, **options)
    assert set(nucleus.translate(["x"] * 400)) == {"4", "5"}
    # Without top-p, tokens 6 and 7 (0.2 of the mass) appear among 400 draws.
    plain = Translator(decoder, _OneTokenVocabulary(), **options)
    assert {"6", "7"} & set(plain.translate(["x"] * 400))
    with pytest.raises(UserInputError, match=r"top_p=1.5 is out of range"):
        Translator(decoder, _OneTokenVocabulary(), top_p=1.5, **options)


def test_cli_top_p_outside_its_range_names_the_flag(capsys, tmp_path):
    from keras_transformer.cli import main

    status = main(
        ["translate", "--model", str(tmp_path / "absent"), "--search", "sample", "--top-p", "0"]
    )
    assert status == 2
    assert "--top-p=0.0 is out of range: it must be a finite number in (0.0, 1.0]" in (
        capsys.readouterr().err
    )


def test_cli_sampling_flags_without_sampling_are_refused(capsys, tmp_path):
    """A sampling flag given to beam search would be ignored: the command says so and how to
    fix it, before any model is loaded."""
    from keras_transformer.cli import main

    for flags in (["--top-p", "0.9"], ["--top-k", "5"], ["--temperature", "0.7"], ["--seed", "3"]):
        status = main(["translate", "--model", str(tmp_path / "absent"), *flags])
        assert status == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1
        assert f"{flags[0]} applies to sampling only (--search sample)" in err[0]
        assert "the search here is 'beam'" in err[0]
    status = main(
        ["translate", "--model", str(tmp_path / "absent"), "--search", "sample", "--seed", "3"]
    )
    assert "applies to sampling only" not in capsys.readouterr().err  # fails later: no model
