import pytest

from keras_transformer.data.number_expressions import (english_cardinal, german_cardinal,
                                                       german_year, number_expressions_corpus,
                                                       write_number_expressions)


@pytest.mark.parametrize("n, english, german", [
    (0, "zero", "null"),
    (1, "one", "eins"),
    (17, "seventeen", "siebzehn"),
    (21, "twenty-one", "einundzwanzig"),
    (101, "one hundred one", "einhunderteins"),
    (421, "four hundred twenty-one", "vierhunderteinundzwanzig"),
    (7030, "seven thousand thirty", "siebentausenddreißig"),
    (421537, "four hundred twenty-one thousand five hundred thirty-seven",
     "vierhunderteinundzwanzigtausendfünfhundertsiebenunddreißig"),
])
def test_cardinals_hand_checked(n, english, german):
    assert english_cardinal(n) == english
    assert german_cardinal(n) == german


def test_years_and_agreement_hand_checked():
    assert german_year(1998) == "neunzehnhundertachtundneunzig"
    assert german_year(2005) == "zweitausendfünf"
    pairs = dict(pair for split in number_expressions_corpus(seed=3).values() for pair in split)
    # Every agreement form the generator can produce is right where it occurs.
    for english, german in pairs.items():
        if english.startswith("one red "):
            noun = english.split()[-1]
            expected = {"dog": "ein roter Hund", "cat": "eine rote Katze",
                        "house": "ein rotes Haus"}.get(noun)
            assert expected is None or german == expected
        if english.startswith("half past "):
            hour = english.split()[-1]
            assert german == {"seven": "halb acht", "twelve": "halb eins"}.get(hour, german)
        if english == "on March third":
            assert german == "am dritten März"


def test_deterministic_for_a_seed_and_splits_disjoint():
    first = number_expressions_corpus(seed=7)
    assert first == number_expressions_corpus(seed=7)
    assert first != number_expressions_corpus(seed=8)
    assert {k: len(v) for k, v in first.items()} == {"train": 20000, "dev": 500, "test": 500}
    sources = {name: {english for english, _ in pairs} for name, pairs in first.items()}
    assert len(sources["train"]) == 20000 and len(sources["test"]) == 500  # distinct
    assert not sources["train"] & sources["dev"]
    assert not sources["train"] & sources["test"]
    assert not sources["dev"] & sources["test"]


def test_written_files_are_line_aligned(tmp_path):
    written = write_number_expressions(tmp_path, seed=1, sizes=(("train", 50), ("test", 5)))
    english = written["test"][0].read_text(encoding="utf-8").splitlines()
    german = written["test"][1].read_text(encoding="utf-8").splitlines()
    assert len(english) == len(german) == 5
    assert dict(number_expressions_corpus(1, sizes=(("train", 50), ("test", 5)))["test"]) == \
        dict(zip(english, german))
