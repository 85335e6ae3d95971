"""The "durations" domain of the number-expressions corpus, which fine-tunes the quickstart
model (configs/quickstart_finetune.yaml): hand-checked German, disjoint splits, nothing shared
with the quickstart corpus, and only characters the quickstart corpus has."""

import pytest

from keras_transformer.data.number_expressions import duration, number_expressions_corpus

SIZES = (("train", 2000), ("dev", 300), ("test", 500))


@pytest.mark.parametrize(
    "spans, form, english, german",
    [
        ([(3, "hour")], "alone", "three hours", "drei Stunden"),
        ([(1, "hour")], "alone", "one hour", "eine Stunde"),
        ([(1, "month")], "alone", "one month", "ein Monat"),
        ([(2, "year")], "ago", "two years ago", "vor zwei Jahren"),
        ([(1, "minute")], "ago", "one minute ago", "vor einer Minute"),
        ([(1, "month")], "for", "for one month", "einen Monat lang"),
        ([(1, "second")], "for", "for one second", "eine Sekunde lang"),
        (
            [(2, "year"), (3, "month")],
            "alone",
            "two years and three months",
            "zwei Jahre und drei Monate",
        ),
        (
            [(1, "year"), (1, "month")],
            "ago",
            "one year and one month ago",
            "vor einem Jahr und einem Monat",
        ),
        (
            [(5, "year"), (7, "month")],
            "ago",
            "five years and seven months ago",
            "vor fünf Jahren und sieben Monaten",
        ),
        (
            [(1, "hour"), (21, "minute")],
            "in",
            "in one hour and twenty-one minutes",
            "in einer Stunde und einundzwanzig Minuten",
        ),
        (
            [(7, "year"), (1, "month")],
            "for",
            "for seven years and one month",
            "sieben Jahre und einen Monat lang",
        ),
        (
            [(1, "year"), (1, "month")],
            "for",
            "for one year and one month",
            "ein Jahr und einen Monat lang",
        ),
    ],
)
def test_durations_hand_checked(spans, form, english, german):
    assert duration(spans, form) == (english, german)


def test_durations_corpus_is_deterministic_disjoint_and_new_to_the_quickstart():
    splits = number_expressions_corpus(seed=0, sizes=SIZES, domain="durations")
    assert splits == number_expressions_corpus(seed=0, sizes=SIZES, domain="durations")
    sources = {name: {english for english, _ in pairs} for name, pairs in splits.items()}
    assert {name: len(s) for name, s in sources.items()} == {"train": 2000, "dev": 300, "test": 500}
    assert not sources["train"] & sources["dev"]
    assert not sources["train"] & sources["test"]
    assert not sources["dev"] & sources["test"]
    # Each form is in the training split, and singulars of each unit, which teach the
    # article's case; every German sentence has at least 5 words (BLEU's 4-grams).
    train = dict(splits["train"])
    forms = {"ago" if e.endswith(" ago") else e.split()[0] for e in train}
    assert {"ago", "in", "for", "one", "two"} <= forms
    for unit in ("one second", "one minute", "one hour", "one month", "one year"):
        assert any(unit in e for e in train), unit
    assert min(len(g.split()) for pairs in splits.values() for _, g in pairs) == 5
    quickstart = number_expressions_corpus(seed=0)
    quickstart_english = {e for pairs in quickstart.values() for e, _ in pairs}
    assert not quickstart_english & set().union(*sources.values())
    # The quickstart's vocabulary spells it: no character it was not trained on.
    seen = {c for pairs in quickstart.values() for pair in pairs for side in pair for c in side}
    used = {c for pairs in splits.values() for pair in pairs for side in pair for c in side}
    assert used <= seen, sorted(used - seen)


def test_an_unknown_domain_is_refused():
    with pytest.raises(ValueError, match="domain 'weather' is not one of"):
        number_expressions_corpus(seed=0, domain="weather")
