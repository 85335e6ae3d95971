"""The "durations" domain of the number-expressions corpus, which fine-tunes the quickstart
model (configs/quickstart_finetune.yaml): hand-checked German, disjoint splits, nothing shared
with the quickstart corpus, and only characters the quickstart corpus has."""

import pytest

from keras_transformer.data.number_expressions import duration, number_expressions_corpus

SIZES = (("train", 2000), ("dev", 300), ("test", 500))


@pytest.mark.parametrize(
    "count, unit, form, english, german",
    [
        (3, "hour", "alone", "three hours", "drei Stunden"),
        (1, "hour", "alone", "one hour", "eine Stunde"),
        (1, "month", "alone", "one month", "ein Monat"),
        (2, "year", "ago", "two years ago", "vor zwei Jahren"),
        (1, "year", "ago", "one year ago", "vor einem Jahr"),
        (1, "minute", "ago", "one minute ago", "vor einer Minute"),
        (5, "month", "ago", "five months ago", "vor fünf Monaten"),
        (1, "hour", "in", "in one hour", "in einer Stunde"),
        (21, "second", "in", "in twenty-one seconds", "in einundzwanzig Sekunden"),
        (1, "month", "for", "for one month", "einen Monat lang"),
        (1, "year", "for", "for one year", "ein Jahr lang"),
        (1, "second", "for", "for one second", "eine Sekunde lang"),
        (
            421,
            "month",
            "for",
            "for four hundred twenty-one months",
            "vierhunderteinundzwanzig Monate lang",
        ),
    ],
)
def test_durations_hand_checked(count, unit, form, english, german):
    assert duration(count, unit, form) == (english, german)


def test_durations_corpus_is_deterministic_disjoint_and_new_to_the_quickstart():
    splits = number_expressions_corpus(seed=0, sizes=SIZES, domain="durations")
    assert splits == number_expressions_corpus(seed=0, sizes=SIZES, domain="durations")
    sources = {name: {english for english, _ in pairs} for name, pairs in splits.items()}
    assert {name: len(s) for name, s in sources.items()} == {"train": 2000, "dev": 300, "test": 500}
    assert not sources["train"] & sources["dev"]
    assert not sources["train"] & sources["test"]
    assert not sources["dev"] & sources["test"]
    # Each form is in the training split, and most of the 20 singulars, which teach the
    # article's case (one in ten goes to each held-out split).
    train = dict(splits["train"])
    forms = {"ago" if e.endswith(" ago") else e.split()[0] for e in train}
    assert {"ago", "in", "for", "two", "three"} <= forms
    singular = {
        duration(1, unit, form)[0]
        for unit in ("second", "minute", "hour", "month", "year")
        for form in ("alone", "ago", "in", "for")
    }
    assert len(singular & train.keys()) >= 12
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
