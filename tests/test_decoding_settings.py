"""The one range rule for decoding settings: `check_decoding_settings`, and `Translator` /
`translate()` applying it (the CLI's and the SavedModel's share these cases: see
test_cli_translate.py and test_export.py)."""

import math

import numpy as np
import pytest

from keras_transformer.decoding.settings import check_decoding_settings, check_translator_settings
from keras_transformer.errors import UserInputError
from keras_transformer.translation import Translator, translate
from tests._decoding_fixtures import tiny_model, train_char_vocabulary

# (settings, the error's text), written out by hand from the documented table.
OUT_OF_RANGE = [
    ({"beam_size": 0}, "beam_size=0 is out of range: it must be an integer of at least 1"),
    ({"beam_size": -3}, "beam_size=-3 is out of range: it must be an integer of at least 1"),
    ({"beam_size": 2.0}, "beam_size=2.0 is out of range: it must be an integer of at least 1"),
    ({"beam_size": True}, "beam_size=True is out of range: it must be an integer of at least 1"),
    ({"alpha": math.nan}, "alpha=nan is out of range: it must be a finite number in [0.0, 10.0]"),
    ({"alpha": math.inf}, "alpha=inf is out of range: it must be a finite number in [0.0, 10.0]"),
    ({"alpha": -math.inf}, "alpha=-inf is out of range: it must be a finite number in [0.0, 10.0]"),
    ({"alpha": -0.5}, "alpha=-0.5 is out of range: it must be a finite number in [0.0, 10.0]"),
    ({"alpha": 10.5}, "alpha=10.5 is out of range: it must be a finite number in [0.0, 10.0]"),
    ({"alpha": "0.6"}, "alpha=0.6 is out of range: it must be a finite number in [0.0, 10.0]"),
    (
        {"max_extra_length": -1},
        "max_extra_length=-1 is out of range: it must be an integer in [0, 65536]",
    ),
    (
        {"max_extra_length": 65537},
        "max_extra_length=65537 is out of range: it must be an integer in [0, 65536]",
    ),
    (
        {"max_extra_length": 2**31 - 1},
        "max_extra_length=2147483647 is out of range: it must be an integer in [0, 65536]",
    ),
    (
        {"max_extra_length": 1.5},
        "max_extra_length=1.5 is out of range: it must be an integer in [0, 65536]",
    ),
    (
        {"num_hypotheses": 0, "beam_size": 4},
        "num_hypotheses=0 is out of range: it must be an integer in [1, 4]",
    ),
    (
        {"num_hypotheses": 5, "beam_size": 4},
        "num_hypotheses=5 is out of range: it must be an integer in [1, 4]",
    ),
]

IN_RANGE = [
    {"beam_size": 1, "num_hypotheses": 1},
    {"beam_size": 4, "num_hypotheses": 4},
    {"beam_size": np.int32(3), "num_hypotheses": np.int64(2)},
    {"alpha": 0.0},
    {"alpha": 0},
    {"alpha": 10.0},
    {"alpha": np.float32(0.6)},
    {"max_extra_length": 0},
    {"max_extra_length": 65536},
]


@pytest.mark.parametrize("settings,message", OUT_OF_RANGE)
def test_out_of_range_names_input_value_and_range(settings, message):
    with pytest.raises(UserInputError) as error:
        check_decoding_settings(**settings)
    assert str(error.value) == message


@pytest.mark.parametrize("settings", IN_RANGE)
def test_bounds_are_inclusive(settings):
    check_decoding_settings(**settings)


def test_max_beam_size_and_labels():
    check_decoding_settings(beam_size=8, max_beam_size=8)
    with pytest.raises(
        UserInputError,
        match=r"^beam_size=9 is out of range: it must be an "
        r"integer in \[1, 8\]$",
    ):
        check_decoding_settings(beam_size=9, max_beam_size=8)
    with pytest.raises(
        UserInputError,
        match=r"^--n-best=5 is out of range: it must be an "
        r"integer in \[1, 4\]$",
    ):
        check_decoding_settings(
            beam_size=4, num_hypotheses=5, labels={"num_hypotheses": "--n-best"}
        )


@pytest.fixture(scope="module")
def vocabulary_path(tmp_path_factory):
    return train_char_vocabulary(tmp_path_factory.mktemp("vocab"))


@pytest.fixture(scope="module")
def translator(vocabulary_path):
    return Translator(
        tiny_model(vocab_size=25, max_length=32), vocabulary_path, beam_size=4, max_extra_length=3
    )


@pytest.mark.parametrize("settings,message", OUT_OF_RANGE)
def test_translator_and_translate_apply_the_rule(settings, message, vocabulary_path, translator):
    model = translator.model
    with pytest.raises(UserInputError) as error:
        Translator(model, vocabulary_path, **settings)
    assert str(error.value) == message
    with pytest.raises(UserInputError) as error:
        translate(["a dog"], model, vocabulary_path, **{"beam_size": 4, **settings})
    assert str(error.value) == message
    if set(settings) == {"num_hypotheses", "beam_size"}:  # the per-call n-best, beam 4
        with pytest.raises(UserInputError) as error:
            translator.translate(["a dog"], num_hypotheses=settings["num_hypotheses"])
        assert str(error.value) == message


def test_translator_accepts_the_bounds(translator, vocabulary_path):
    n_best = Translator(
        translator.model, vocabulary_path, beam_size=4, num_hypotheses=4, max_extra_length=3
    ).translate(["a dog", "hello"])
    assert [len(hypotheses) for hypotheses in n_best] == [4, 4]
    for settings in ({"alpha": 0.0}, {"alpha": 10.0}, {"max_extra_length": 0}):
        result = Translator(
            translator.model, vocabulary_path, beam_size=1, **{"max_extra_length": 3, **settings}
        ).translate(["a dog"])
        assert isinstance(result[0], str)


def test_the_length_penalty_is_one_of_its_forms():
    check_decoding_settings(length_penalty="gnmt")
    check_decoding_settings(length_penalty="power")
    message = "length_penalty=linear is not a choice: it must be one of gnmt, power"
    with pytest.raises(UserInputError, match=f"^{message}$"):
        check_decoding_settings(length_penalty="linear")
    with pytest.raises(UserInputError, match="^--length-penalty=GNMT is not a choice"):
        check_decoding_settings(
            length_penalty="GNMT", labels={"length_penalty": "--length-penalty"}
        )


# (Translator settings, the error's text, the same setting given as `translate` flags).
TRANSLATOR_CASES = [
    (
        {"search": "viterbi"},
        "search=viterbi is not a choice: it must be one of beam, greedy, sample",
        "--search=viterbi is not a choice: it must be one of beam, greedy, sample",
    ),
    (
        {"on_too_long": "wrap"},
        "on_too_long=wrap is not a choice: it must be one of truncate, error",
        "--on-too-long=wrap is not a choice: it must be one of truncate, error",
    ),
    (
        {"batch_size": 0},
        "batch_size=0 is out of range: it must be an integer of at least 1",
        "--batch-size=0 is out of range: it must be an integer of at least 1",
    ),
    (
        {"search": "sample", "temperature": 0.0},
        "temperature=0.0 is out of range: it must be a finite number > 0",
        "--temperature=0.0 is out of range: it must be a finite number > 0",
    ),
    (
        {"search": "sample", "top_k": -1},
        "top_k=-1 is out of range: it must be an integer of at least 0",
        "--top-k=-1 is out of range: it must be an integer of at least 0",
    ),
    (
        {"jit_compile": True, "compile": False},
        "jit_compile=True compiles the search with XLA, compile=False runs it eagerly: give "
        "one of them",
        "--jit-compile compiles the search with XLA, --no-compile runs it eagerly: give one "
        "of them",
    ),
    (
        {"search": "greedy", "num_hypotheses": 2},
        "num_hypotheses=2 needs beam search, but the search here is 'greedy': use "
        "search='beam', or num_hypotheses=1",
        "--n-best 2 needs beam search, but the search here is 'greedy': leave out --search "
        "greedy, or --n-best",
    ),
    (
        {"length_penalty": "linear"},
        "length_penalty=linear is not a choice: it must be one of gnmt, power",
        "--length-penalty=linear is not a choice: it must be one of gnmt, power",
    ),
]


@pytest.mark.parametrize("settings, message, flag_message", TRANSLATOR_CASES)
def test_translator_settings_are_checked_once_for_python_and_the_commands(
    settings, message, flag_message, tmp_path
):
    from keras_transformer.cli._model_options import SETTING_FLAGS

    with pytest.raises(UserInputError) as error:
        check_translator_settings(**settings)
    assert str(error.value) == message
    with pytest.raises(UserInputError) as error:
        check_translator_settings(**settings, labels=SETTING_FLAGS)
    assert str(error.value) == flag_message
    # Translator.load checks before it loads: no model there, yet the settings' error.
    with pytest.raises(UserInputError) as error:
        Translator.load(str(tmp_path / "no-run"), **settings)
    assert str(error.value) == message


def test_sampling_settings_are_checked_only_for_sampling():
    check_translator_settings(search="beam", temperature=0.0, top_k=-1)
    check_translator_settings(search="sample", temperature=0.5, top_k=3, top_p=0.9)
