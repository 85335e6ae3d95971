"""Tests of keras_transformer.parsing.trees: reading brackets, preprocessing, clear errors."""

import re

import pytest

from keras_transformer.errors import UserInputError
from keras_transformer.parsing.trees import (
    Tree,
    TreeSyntaxError,
    escape_brackets,
    merge_same_label_unaries,
    parse_tree,
    phrase_subtrees,
    preprocess,
    read_preprocessed,
    read_trees,
    strip_function_tags,
)
from tests._parsing_fixtures import SHARED_TREE_FILES, shared_trees

WSJ_LINE = (
    "( (S (NP-SBJ-1 (NNP Mr.) (NNP Vinken)) (VP (VBZ is) (VP (VBN named) "
    "(S (NP-SBJ (-NONE- *-1)) (NP-PRD (NN chairman))) (SBAR (-NONE- 0) "
    "(S (-NONE- *T*-2))))) (. .)) )"
)


def test_parse_tree_reads_labels_words_and_the_nameless_root():
    tree = parse_tree("( (S (NP (DT the) (NN dog)) (VP (VBZ barks))) )")
    assert tree.label == ""
    assert tree.children[0].label == "S"
    assert tree.leaves() == ["the", "dog", "barks"]
    assert tree.pos() == [("the", "DT"), ("dog", "NN"), ("barks", "VBZ")]
    assert str(tree) == "( (S (NP (DT the) (NN dog)) (VP (VBZ barks))))"


def test_preprocess_strips_function_tags_none_elements_and_sets_top():
    tree = preprocess(parse_tree(WSJ_LINE))
    # Hand-derived: NP-SBJ-1 -> NP, NP-PRD -> NP, the -NONE- subject removed, SBAR with only
    # traces below removed entirely (its S too), nameless root -> TOP.
    assert str(tree) == (
        "(TOP (S (NP (NNP Mr.) (NNP Vinken)) (VP (VBZ is) (VP (VBN named) "
        "(S (NP (NN chairman))))) (. .)))"
    )


@pytest.mark.parametrize(
    "label, expected",
    [
        ("NP-SBJ-1", "NP"),
        ("NP=2", "NP"),
        ("PP-LOC-CLR", "PP"),
        ("-NONE-", "-NONE-"),
        ("-LRB-", "-LRB-"),
        ("NP", "NP"),
        ("PRP$", "PRP$"),
    ],
)
def test_strip_function_tags(label, expected):
    assert strip_function_tags(label) == expected


def test_preprocess_renames_root_and_wraps_other_roots():
    assert str(preprocess(parse_tree("(ROOT (NP (NN hi)))"))) == "(TOP (NP (NN hi)))"
    assert str(preprocess(parse_tree("(S (NP (NN hi)))"))) == "(TOP (S (NP (NN hi))))"
    with pytest.raises(UserInputError, match="no words"):
        preprocess(parse_tree("( (S (-NONE- *)))"))


@pytest.mark.parametrize(
    "line, message",
    [
        ("", "empty line"),
        ("(S (NP (NN dog))", "1 '\\(' not closed"),
        ("(S (NP (NN dog))))", "closes nothing"),
        ("the dog barks", "is not a tree"),
        ("(S (NN a)) (S (NN b))", "after the end of the tree"),
    ],
)
def test_bad_input_gives_one_error_with_file_and_line(tmp_path, line, message):
    path = tmp_path / "bad.trees"
    path.write_text("(S (NN ok))\n" + line + "\n(S (NN fine))\n")
    with pytest.raises(TreeSyntaxError, match=message) as info:
        read_trees(path)
    assert f"{path} line 2" in str(info.value)
    assert "\n" not in str(info.value)


def test_multiline_mrg_files(tmp_path):
    path = tmp_path / "wsj_0001.mrg"
    path.write_text(
        "( (S \n    (NP-SBJ (NNP Pierre) )\n    (VP (VBZ sleeps) )))\n\n"
        "( (S (NP (PRP It)) (VP (VBZ works)) ))\n"
    )
    trees = read_preprocessed(path)
    assert [str(t) for t in trees] == [
        "(TOP (S (NP (NNP Pierre)) (VP (VBZ sleeps))))",
        "(TOP (S (NP (PRP It)) (VP (VBZ works))))",
    ]
    path.write_text("( (S (NP (NNP Pierre))\n\n")
    with pytest.raises(TreeSyntaxError, match=r"wsj_0001.mrg line 1: unbalanced"):
        read_trees(path)


def test_tree_equality_and_preprocess_leaves_input_unchanged():
    tree = parse_tree(WSJ_LINE)
    before = str(tree)
    preprocess(tree)
    assert str(tree) == before
    assert Tree("NP", [Tree("NN", ["a"])]) == parse_tree("(NP (NN a))")


def test_brackets_in_words_and_labels_are_written_as_the_treebank_does():
    # By hand, the PTB spelling: every '(' -> -LRB-, every ')' -> -RRB-, inside words too.
    assert [escape_brackets(w) for w in ["(", ")", ":-)", "(a", "a)b(", "-LRB-", "dog"]] == [
        "-LRB-",
        "-RRB-",
        ":--RRB-",
        "-LRB-a",
        "a-RRB-b-LRB-",
        "-LRB-",
        "dog",
    ]
    tree = Tree("TOP", [Tree("NP(", [Tree("NN", [":-)"]), Tree("NN", ["(a"])])])
    assert str(tree) == "(TOP (NP-LRB- (NN :--RRB-) (NN -LRB-a)))"
    assert parse_tree(str(tree)).leaves() == [":--RRB-", "-LRB-a"]


@pytest.mark.parametrize("name", SHARED_TREE_FILES)
def test_every_shared_tree_reads_and_preprocesses(data_dir, name):
    path, trees = shared_trees(data_dir, name)
    raw_lines = path.read_text(encoding="utf-8").splitlines()
    assert len(trees) == len(raw_lines)
    for raw, tree in zip(raw_lines, trees):
        # Reference: the words are the raw line's leaf tokens that are not -NONE- elements,
        # found by a regex independent of the reader.
        leaves = re.findall(r"\(([^\s()]+) ([^\s()]+)\)", raw)
        expected = [word for tag, word in leaves if tag != "-NONE-"]
        assert tree.leaves() == expected
        assert tree.label == "TOP"
        text = str(tree)
        assert "-NONE-" not in text and "-SBJ" not in text and "(ROOT" not in text
        assert parse_tree(text) == tree  # the written form reads back the same


@pytest.mark.parametrize(
    "text, expected",
    [
        # A chain of three NPs over one phrase is one NP; the VP with two VP children stays.
        (
            "(TOP (S (NP (NP (NP (DT the) (NN dog)))) (VP (VP (VBZ barks)) (CC and) (VP (VBZ runs)))))",
            "(TOP (S (NP (DT the) (NN dog)) (VP (VP (VBZ barks)) (CC and) (VP (VBZ runs)))))",
        ),
        # Only the same label merges (S over VP stays); a preterminal child never merges.
        ("(TOP (S (S (VP (VB Go))) (NN (NN x))))", "(TOP (S (S (VP (VB Go))) (NN (NN x))))"),
        ("(TOP (S (S (S (VP (VB Go))))))", "(TOP (S (VP (VB Go))))"),
    ],
)
def test_merge_same_label_unaries(text, expected):
    tree = parse_tree(text)
    assert str(merge_same_label_unaries(tree)) == expected
    assert str(tree) == text  # the input is not changed


def test_phrase_subtrees_are_every_phrase_of_two_words_or_more_below_the_whole_sentence():
    text = (
        "(TOP (S (NP (NP (DT the) (NN dog)) (PP (IN in) (NP (NN town)))) "
        "(VP (VBZ barks) (ADVP (RB loudly))) (. .)))"
    )
    tree = parse_tree(text)
    # By hand: S spans all 7 words (the example itself); the outer NP has 4 words, its NP,
    # the PP and the VP 2 each; NP (town) and ADVP (loudly) have one; preterminals are never
    # phrases. Depth first, left to right.
    assert [str(phrase) for phrase in phrase_subtrees(tree)] == [
        "(TOP (NP (NP (DT the) (NN dog)) (PP (IN in) (NP (NN town)))))",
        "(TOP (NP (DT the) (NN dog)))",
        "(TOP (PP (IN in) (NP (NN town))))",
        "(TOP (VP (VBZ barks) (ADVP (RB loudly))))",
    ]
    assert [phrase.leaves() for phrase in phrase_subtrees(tree, min_words=3)] == [
        ["the", "dog", "in", "town"]
    ]
    assert len(phrase_subtrees(tree, min_words=1)) == 6
    # A unary chain over the whole sentence is the sentence, at every level.
    assert phrase_subtrees(parse_tree("(TOP (S (VP (VB Go) (ADVP (RB now)))))")) == []
    assert str(tree) == text  # the input is not changed
