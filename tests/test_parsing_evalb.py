"""Tests of keras_transformer.parsing.evalb against EVALB's own sample and hand-computed cases."""

import json
import pathlib
import re

import pytest

from keras_transformer.errors import UserInputError
from keras_transformer.parsing.evalb import (
    COLLINS,
    evaluate,
    evaluate_files,
    read_params,
    with_gold_tags,
)
from keras_transformer.parsing.trees import Tree, parse_tree

SAMPLE = pathlib.Path(__file__).parent / "data" / "evalb_sample"


def _rsl():
    """Per-sentence rows and summary figures of EVALB's sample.rsl."""
    text = (SAMPLE / "sample.rsl").read_text()
    rows = [line for line in text.splitlines() if re.match(r"^\s+\d+\s+\d+\s+[012]\s", line)]
    sections = text.split("-- len<=40 --")
    summaries = []
    for section in sections:
        summaries.append(
            {
                key.strip(): float(value)
                for key, value in re.findall(r"^([A-Za-z0-9 ]+?)\s*=\s*([\d.]+)$", section, re.M)
            }
        )
    return rows, summaries


def test_reproduces_evalb_sample_rsl():
    params = read_params(SAMPLE / "sample.prm")
    assert params.eq_labels == (("T", "TT"),) and params.eq_words == (("This", "this"),)
    report = evaluate_files(SAMPLE / "sample.gld", SAMPLE / "sample.tst", params)
    rows, (all_figures, short_figures) = _rsl()
    assert [r.format() for r in report.sentences] == rows
    for summary, expected in ((report.all, all_figures), (report.short, short_figures)):
        assert summary.sentences == expected["Number of sentence"]
        assert summary.error_sentences == expected["Number of Error sentence"]
        assert summary.skip_sentences == expected["Number of Skip  sentence"]
        assert summary.valid_sentences == expected["Number of Valid sentence"]
        for name, value in (
            ("Bracketing Recall", summary.recall),
            ("Bracketing Precision", summary.precision),
            ("Complete match", summary.complete_match),
            ("Average crossing", summary.average_crossing),
            ("No crossing", summary.no_crossing),
            ("2 or less crossing", summary.two_or_less_crossing),
            ("Tagging accuracy", summary.tagging_accuracy),
        ):
            assert round(value, 2) == expected[name], name
    # The summary text carries EVALB's lines with the same figures.
    text = report.format()
    assert "Bracketing Recall         =  87.76" in text
    assert "Number of Error sentence  =      5" in text


def test_collins_prm_file_equals_the_builtin_settings():
    assert read_params(SAMPLE / "COLLINS.prm") == COLLINS


# Hand-computed cases under COLLINS.prm. Brackets are (label, start, end) over the words left
# once punctuation and -NONE- are deleted.
CASES = [
    # 1. TOP and '.' deleted, function tags ignored, ADVP = PRT: gold S(0,3) NP(0,1) VP(1,3)
    #    PRT(2,3); the test has the same spans with ADVP: 4/4 matched. Tags: RP vs RB, 2 of 3.
    (
        "(TOP (S (NP-SBJ (PRP He)) (VP (VBD looked) (PRT (RP up))) (. .)))",
        "(TOP (S (NP (PRP He)) (VP (VBD looked) (ADVP (RB up))) (. .)))",
        4,
        4,
        4,
        0,
        2,
        3,
    ),
    # 2. A repeated gold bracket NP(0,1) twice, once in the test: matched one to one, 3 of 4.
    ("(S (NP (NP (NN a))) (VP (VB b)))", "(S (NP (NN a)) (VP (VB b)))", 3, 4, 3, 0, 2, 2),
    # 3. The gold NP holds only a trace: deleted with it; S(0,1) VP(0,1) both matched.
    ("(S (NP-SBJ (-NONE- *)) (VP (VB go)))", "(S (VP (VB go)))", 2, 2, 2, 0, 1, 1),
    # 4. Test B(1,3) crosses gold A(0,2): 1 crossing; S matched only (1 of 2, 1 of 2).
    ("(S (A (X a) (X b)) (X c))", "(S (X a) (B (X b) (X c)))", 1, 2, 2, 1, 3, 3),
    # 5. The test's quote and comma are tagged as words (NN): more words than the gold's
    #    after deletion -> an error sentence, not scored.
    ("(S (`` ``) (NP (NN a)) (, ,))", "(S (NN ``) (NP (NN a)) (NN ,))", 0, 0, 0, 0, 0, 0),
]


@pytest.mark.parametrize("gold, test, matched, n_gold, n_test, crossing, correct, words", CASES)
def test_hand_computed_sentences(gold, test, matched, n_gold, n_test, crossing, correct, words):
    result = evaluate([gold], [test]).sentences[0]
    if n_gold == 0:
        assert result.status == 1 and "length unmatch (1|3)" in result.message
        return
    assert result.status == 0
    assert (result.matched, result.gold, result.test, result.crossing) == (
        matched,
        n_gold,
        n_test,
        crossing,
    )
    assert (result.correct_tags, result.words) == (correct, words)


def test_corpus_figures_by_hand_and_errors_counted():
    gold = [c[0] for c in CASES] + ["(S (NP (NN x)) (VP (VB y)))", "(S (NN x))", "(S (NN z))"]
    test = [c[1] for c in CASES] + ["", "(S (NN w))", "(S (NN z)"]
    report = evaluate(gold, test)
    summary = report.all
    # Valid sentences 1-4: matched 4+3+2+1 = 10, gold 4+4+2+2 = 12, test 4+3+2+2 = 11.
    assert (summary.matched, summary.gold_brackets, summary.test_brackets) == (10, 12, 11)
    assert summary.recall == pytest.approx(100 * 10 / 12)
    assert summary.precision == pytest.approx(100 * 10 / 11)
    assert summary.f1 == pytest.approx(2 * (10 / 12) * (10 / 11) / (10 / 12 + 10 / 11) * 100)
    # Complete match: sentences 1 and 3 of the 4 valid ones.
    assert summary.complete_match == pytest.approx(50.0)
    # Errors: case 5 (length), the mismatched word, the unbalanced test; skip: the empty line.
    assert (summary.sentences, summary.error_sentences, summary.skip_sentences) == (8, 3, 1)
    assert [(line, status) for line, status, _ in report.problems()] == [
        (5, 1),
        (6, 2),
        (7, 1),
        (8, 1),
    ]
    figures = json.loads(report.to_json(model="m"))
    assert figures["f1"] == round(summary.f1, 2) and figures["error_sentences"] == 3
    assert figures["model"] == "m" and figures["len<=40"]["sentences"] == 8
    assert "error sentence at line 7: words unmatch (x|w)" in report.format()


def test_length_cutoff_counts_punctuation_but_not_traces():
    words = " ".join(f"(NN w{i})" for i in range(40))
    gold_41 = f"(S {words} (. .))"  # 41 words for the length: over the cut-off
    gold_40 = f"(S {words} (-NONE- *))"  # 40: within it
    report = evaluate([gold_41, gold_40], [gold_41, f"(S {words})"])
    assert [r.length for r in report.sentences] == [41, 40]
    assert report.short.sentences == 1 and report.all.sentences == 2


def test_line_count_mismatch_is_refused():
    with pytest.raises(UserInputError, match="2 gold trees but 1 test trees"):
        evaluate(["(S (NN a))", "(S (NN b))"], ["(S (NN a))"])


def test_a_gold_file_without_trees_is_refused(tmp_path):
    # Scoring against nothing would print all-zero figures and exit 0.
    for text in ("", "\n\n"):
        gold, test = tmp_path / "gold.trees", tmp_path / "test.trees"
        gold.write_text(text, encoding="utf-8")
        test.write_text(text, encoding="utf-8")
        with pytest.raises(UserInputError, match="holds no gold trees"):
            evaluate_files(gold, test)


def test_tags_not_predicted_report_no_tagging_accuracy():
    # XX slots filled with the gold tags: the tags would score a meaningless 100.
    gold = "(TOP (S (NP (DT a) (NN b)) (VP (VBZ c)) (. .)))"
    test = "(TOP (S (NP (DT a) (NN b)) (VP (VBZ c) (. .))))"
    measured = evaluate([gold], [test])
    assert measured.all.tagging_accuracy == 100.0
    report = evaluate([gold], [test], tags_predicted=False)
    assert report.all.tagging_accuracy is None and report.short.tagging_accuracy is None
    assert report.all.f1 == measured.all.f1 == 100.0  # bracket figures are unchanged
    figures = json.loads(report.to_json())
    assert figures["tagging_accuracy"] is None and figures["len<=40"]["tagging_accuracy"] is None
    assert figures["f1"] == 100.0
    text = report.format(per_sentence=True)
    assert "Tagging accuracy          =    n/a" in text and "100.00" in text
    # The per-sentence row keeps EVALB's columns, tags shown as not measured.
    row = next(line for line in text.splitlines() if line.startswith("   1 "))
    assert row.split()[-3:] == ["3", "n/a", "n/a"]
    assert len(row) == len(measured.sentences[0].format())


GOLD = ["(TOP (S (NP (DT a) (NN b)) (VP (VBZ c)) (. .)))", "(TOP (S (NP (PRP d)) (VP (VBZ e))))"]


def test_with_gold_tags_fills_xx_slots_of_lines_and_of_trees():
    test = ["(TOP (S (NP (XX a) (XX b)) (VP (XX c) (XX .))))", "(TOP (S (XX d) (VP (XX e))))"]
    filled, done = with_gold_tags(GOLD, test)
    assert done and filled == [
        "(TOP (S (NP (DT a) (NN b)) (VP (VBZ c) (. .))))",
        "(TOP (S (PRP d) (VP (VBZ e))))",
    ]
    # Trees in, trees out (the pipeline's dev evaluation), the gold given as trees too.
    trees, done = with_gold_tags([parse_tree(g) for g in GOLD], [parse_tree(t) for t in test])
    assert done and all(isinstance(t, Tree) for t in trees)
    assert [str(t) for t in trees] == filled
    # By hand: the '.' is now deleted by its tag; gold S NP VP, test S NP VP: all matched.
    report = evaluate(GOLD[:1], filled[:1], tags_predicted=False)
    assert (report.all.error_sentences, report.all.f1) == (0, 100.0)


def test_with_gold_tags_leaves_predicted_tags_alone():
    # One predicted tag anywhere: no tree is filled, or tagging accuracy would mix gold tags
    # into the parser's.
    test = ["(TOP (S (NP (XX a) (XX b)) (VP (XX c) (XX .))))", "(TOP (S (PRP d) (VP (XX e))))"]
    assert with_gold_tags(GOLD, test) == (test, False)
    trees = [parse_tree(t) for t in test]
    assert with_gold_tags(GOLD, trees) == (trees, False)
    assert with_gold_tags(GOLD, ["", None]) == (["", None], False)  # no tag at all
    # Asked to, it replaces predicted tags too (a POS-slot parser's bracket F1).
    replaced, done = with_gold_tags(GOLD, test, replace_predicted=True)
    assert done and replaced == [
        "(TOP (S (NP (DT a) (NN b)) (VP (VBZ c) (. .))))",
        "(TOP (S (PRP d) (VP (VBZ e))))",
    ]


def test_with_gold_tags_keeps_what_evalb_reports_as_errors():
    test = ["(TOP (S (XX a) (XX b)))", "", "(TOP (S (XX d) (VP (XX e))))"]
    gold = [GOLD[0], GOLD[1], "(TOP (S (NP (PRP d)) (VP (VBZ e)"]
    # Another word count, a skip sentence, an unreadable gold tree: as given.
    assert with_gold_tags(gold, test) == (test, True)
    unreadable = ["(TOP (S (XX a) (XX b) (XX c) (XX .)))", "(TOP (S (XX d)"]
    assert with_gold_tags(GOLD, unreadable) == (unreadable, False)
