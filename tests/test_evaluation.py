"""evaluate() against sacrebleu's own corpus_bleu / corpus_chrf, and the paper-style BLEU."""

import json
import math

import pytest
import sacrebleu

from keras_transformer.errors import UserInputError
from keras_transformer.evaluation import (
    EvaluationReport,
    evaluate,
    headline_json,
    paper_bleu,
    split_compounds,
)

HYPOTHESES = [
    "Der Hund bellt laut im Garten.",
    "Das ist ein Know-how-Transfer.",
    "Sie las das Buch gestern Abend.",
    "Wir fahren morgen nach Berlin.",
]
REFERENCES = [
    "Der Hund bellt im Garten laut.",
    "Das ist ein Know-how-Transfer.",
    "Gestern Abend las sie das Buch.",
    "Morgen fahren wir nach Berlin.",
]


def test_evaluate_matches_sacrebleu_corpus_bleu_and_chrf():
    report = evaluate(HYPOTHESES, REFERENCES)
    expected_bleu = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES])
    expected_chrf = sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES])
    assert 0 < report.bleu < 100
    assert report.bleu == pytest.approx(expected_bleu.score, abs=1e-9)
    assert report.chrf == pytest.approx(expected_chrf.score, abs=1e-9)
    assert report.bleu_signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp")
    assert f"version:{sacrebleu.__version__}" in report.bleu_signature
    assert report.num_sentences == 4 and report.paper_bleu is None
    assert "signature: nrefs:1" in report.format()


def test_several_references_and_lowercase():
    second = [r.lower() for r in REFERENCES]
    report = evaluate(HYPOTHESES, [REFERENCES, second], lowercase=True)
    expected = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES, second], lowercase=True)
    assert report.bleu == pytest.approx(expected.score, abs=1e-9)
    assert "nrefs:2|case:lc" in report.bleu_signature


def test_lowercase_also_makes_chrf_case_insensitive():
    # A lower-cased model's output against cased references: chrF must not count case.
    lowered = [h.lower() for h in HYPOTHESES]
    report = evaluate(lowered, REFERENCES, lowercase=True)
    assert report.chrf == pytest.approx(evaluate(HYPOTHESES, REFERENCES, lowercase=True).chrf)
    expected = sacrebleu.metrics.CHRF(lowercase=True).corpus_score(lowered, [REFERENCES])
    assert report.chrf == pytest.approx(expected.score, abs=1e-9)
    assert report.chrf > evaluate(lowered, REFERENCES).chrf
    assert "case:lc" in report.chrf_signature


def test_split_compounds_follows_the_perl_substitution():
    # perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g': non-overlapping, left to right.
    assert split_compounds("Know-how") == "Know ##AT##-##AT## how"
    assert split_compounds("a-b-c") == "a ##AT##-##AT## b-c"
    assert split_compounds("a - b") == "a - b"
    assert split_compounds("E-Mail-Adresse und US-Präsident") == (
        "E ##AT##-##AT## Mail ##AT##-##AT## Adresse und US ##AT##-##AT## Präsident"
    )


def test_paper_bleu_is_labelled_and_differs_from_sacrebleu():
    report = evaluate(HYPOTHESES, REFERENCES, target_language="de", with_paper_bleu=True)
    assert "NOT comparable with sacreBLEU" in report.paper_bleu_note
    score, _ = paper_bleu(HYPOTHESES, REFERENCES)
    assert report.paper_bleu == pytest.approx(score)
    # Splitting compounds adds matched tokens for the identical second segment: more matches.
    assert report.paper_bleu != pytest.approx(report.bleu)
    assert paper_bleu(["Das ist ein Test-Satz."], ["Das ist ein Test-Satz."])[0] == (
        pytest.approx(100.0)
    )
    line = json.loads(headline_json(report, seconds=1.5))
    assert line["bleu"] == round(report.bleu, 2) and line["seconds"] == 1.5
    assert "paper_bleu_not_sacrebleu" in line


def test_bad_input():
    with pytest.raises(UserInputError, match="3 lines but there are 4 hypotheses"):
        evaluate(HYPOTHESES, REFERENCES[:3])
    with pytest.raises(TypeError, match=r"hypotheses\[1\] is NoneType"):
        evaluate(["a", None], ["a", "b"])
    assert isinstance(evaluate([""], [""]), EvaluationReport)


def test_moses_lowercase_bleu_scores_lower_cased_moses_tokens():
    pytest.importorskip("sacremoses")
    from keras_transformer.evaluation import moses_lowercase_bleu

    hypotheses = ["Ein Mann fährt Fahrrad, nicht wahr?", "Zwei Hunde spielen im Schnee."]
    references = ["ein Mann fährt ein Fahrrad, oder?", "Zwei hunde spielen im Schnee ."]
    # The same text tokenized by hand as Moses does (punctuation split off), lower-cased.
    tokenized_hypotheses = [
        "ein mann fährt fahrrad , nicht wahr ?",
        "zwei hunde spielen im schnee .",
    ]
    tokenized_references = ["ein mann fährt ein fahrrad , oder ?", "zwei hunde spielen im schnee ."]
    expected = sacrebleu.corpus_bleu(
        tokenized_hypotheses, [tokenized_references], tokenize="none"
    ).score
    score, how = moses_lowercase_bleu(hypotheses, references, language="de")
    assert score == pytest.approx(expected, abs=1e-9)
    assert "lower-cased" in how and "not comparable" in how
    # Case and attached punctuation no longer matter: cased 13a BLEU differs.
    assert sacrebleu.corpus_bleu(hypotheses, [references]).score != pytest.approx(score)


def test_paper_bleu_of_a_case_counted_by_hand():
    pytest.importorskip("sacremoses")
    hypotheses = ["Der Know-how-Transfer klappt.", "Wir sehen uns morgen, Anna!"]
    references = ["Der Know-how-Transfer klappt gut.", "Wir sehen uns am Montag, Anna!"]
    # Moses-tokenized, compounds split (@ stands for ##AT##-##AT##):
    #   h1 Der Know @ how @ Transfer klappt .          (8 tokens)
    #   r1 Der Know @ how @ Transfer klappt gut .      (9)
    #   h2 Wir sehen uns morgen , Anna !               (7)
    #   r2 Wir sehen uns am Montag , Anna !            (8)
    # Clipped matches / hypothesis n-grams, sentence 1 + sentence 2:
    #   1-grams 8/8 + 6/7 (morgen)  = 14/15
    #   2-grams 6/7 (klappt .) + 4/6 (uns morgen, morgen ,) = 10/13
    #   3-grams 5/6 + 2/5 (Wir sehen uns; , Anna !)   = 7/11
    #   4-grams 4/5 + 0/4                              = 4/9
    # multi-bleu.perl: BP = exp(1 - r/c) = exp(1 - 17/15) (c 15 < r 17), then
    # BLEU = BP * (product of the four precisions)^(1/4).
    expected = 100 * math.exp(1 - 17 / 15) * (14 / 15 * 10 / 13 * 7 / 11 * 4 / 9) ** 0.25
    assert paper_bleu(hypotheses, references)[0] == pytest.approx(expected, abs=1e-9)  # 58.75
    # multi-bleu.perl does not smooth: with no 4-gram matched in the corpus (sentence 2
    # alone), log(0) makes the score 0, whatever the other precisions.
    assert paper_bleu(hypotheses[1:], references[1:])[0] == 0.0
