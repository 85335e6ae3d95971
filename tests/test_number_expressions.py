import pytest

from keras_transformer.data.number_expressions import (
    english_cardinal,
    german_cardinal,
    german_year,
    number_expressions_corpus,
    write_number_expressions,
)


@pytest.mark.parametrize(
    "n, english, german",
    [
        (0, "zero", "null"),
        (1, "one", "eins"),
        (17, "seventeen", "siebzehn"),
        (21, "twenty-one", "einundzwanzig"),
        (101, "one hundred one", "einhunderteins"),
        (421, "four hundred twenty-one", "vierhunderteinundzwanzig"),
        (7030, "seven thousand thirty", "siebentausenddreißig"),
        (
            421537,
            "four hundred twenty-one thousand five hundred thirty-seven",
            "vierhunderteinundzwanzigtausendfünfhundertsiebenunddreißig",
        ),
    ],
)
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
            expected = {
                "dog": "ein roter Hund",
                "cat": "eine rote Katze",
                "house": "ein rotes Haus",
            }.get(noun)
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
    assert {k: len(v) for k, v in first.items() if k != "train"} == {"dev": 500, "test": 500}
    sources = {name: {english for english, _ in pairs} for name, pairs in first.items()}
    assert len(sources["train"]) == 20000 and len(sources["test"]) == 500  # distinct
    assert len(sources["dev"]) == 500
    assert not sources["train"] & sources["dev"]
    assert not sources["train"] & sources["test"]
    assert not sources["dev"] & sources["test"]


def test_written_files_are_line_aligned(tmp_path):
    written = write_number_expressions(tmp_path, seed=1, sizes=(("train", 50), ("test", 5)))
    english = written["test"][0].read_text(encoding="utf-8").splitlines()
    german = written["test"][1].read_text(encoding="utf-8").splitlines()
    assert len(english) == len(german) == 5
    assert dict(number_expressions_corpus(1, sizes=(("train", 50), ("test", 5)))["test"]) == dict(
        zip(english, german)
    )


def test_training_split_repeats_the_small_families():
    import collections

    splits = number_expressions_corpus(seed=0)
    lines = collections.Counter(english for english, _ in splits["train"])
    assert len(lines) == 20000 and max(lines.values()) == 16  # max_repeats
    # Every repeat is the same pair: one German per English sentence.
    assert len(set(splits["train"])) == 20000
    # "half past X" has 12 members, each drawn over 60 times in some 45000 draws: one line
    # per 4 draws, so each training member reaches the cap of 16 lines.
    half_past = {e: n for e, n in lines.items() if e.startswith("half past ")}
    assert 8 <= len(half_past) <= 12 and set(half_past.values()) == {16}
    # A cardinal of 100000 or more (900000 of them) keeps one line, a year (1000 of them)
    # fewer than the cap, so the large families keep most of their share: under 35% more
    # lines in all (26027 for this seed).
    large = [n for e, n in lines.items() if e.split()[1:2] == ["hundred"] and "thousand" in e]
    years = [n for e, n in lines.items() if e.startswith("in ")]
    assert len(large) > 1000 and set(large) == {1}
    assert len(years) > 500 and max(years) < 16
    assert len(splits["train"]) < 1.35 * 20000
    # max_repeats=1: one line per sentence, the same 20000 sentences and held-out splits.
    distinct = number_expressions_corpus(seed=0, max_repeats=1)
    assert len(distinct["train"]) == 20000 and dict(distinct["train"]).keys() == lines.keys()
    assert distinct["test"] == splits["test"] and distinct["dev"] == splits["dev"]
    # draws_per_line=1: every draw a line, up to the cap.
    every = collections.Counter(
        e for e, _ in number_expressions_corpus(seed=0, draws_per_line=1)["train"]
    )
    assert every.keys() == lines.keys() and all(every[e] >= n for e, n in lines.items())
    assert sum(every.values()) > 1.5 * 20000
    with pytest.raises(ValueError, match="max_repeats"):
        number_expressions_corpus(seed=0, max_repeats=0)
