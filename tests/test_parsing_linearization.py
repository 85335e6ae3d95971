"""Tests of keras_transformer.parsing.linearization: Vinyals et al.'s sequences and repair."""

import random

import pytest

from keras_transformer.parsing.linearization import (
    REPAIRS,
    WORD_SLOT,
    Linearizer,
    flat_tree,
    with_tags,
    without_tags,
)
from keras_transformer.parsing.trees import Tree, parse_tree
from tests._parsing_fixtures import SHARED_TREE_FILES, shared_trees

TREE = parse_tree("(TOP (S (NP (DT the) (NN dog)) (VP (VBZ barks)) (. .)))")
WORDS = ["the", "dog", "barks", "."]


@pytest.mark.parametrize(
    "pos_tags, closing_labels, word_slots, expected",
    [
        # Vinyals et al.'s Figure 2 form, written out by hand.
        (False, True, False, "(S (NP XX XX )NP (VP XX )VP XX )S"),
        (True, True, False, "(S (NP DT NN )NP (VP VBZ )VP . )S"),
        (False, False, False, "(S (NP XX XX ) (VP XX ) XX )"),
        (False, True, True, "(S (NP the dog )NP (VP barks )VP . )S"),
    ],
)
def test_linearize_depth_first(pos_tags, closing_labels, word_slots, expected):
    linearizer = Linearizer(pos_tags=pos_tags, closing_labels=closing_labels, word_slots=word_slots)
    assert linearizer.target_text(TREE) == expected
    result = linearizer.delinearize(expected, WORDS)
    assert result.repairs == ()
    assert result.tree == (TREE if pos_tags else without_tags(TREE))


@pytest.mark.parametrize(
    "sequence, expected, repairs",
    [
        # Words without a slot go to the last top-level phrase.
        (
            "(S (NP XX XX )NP (VP XX",
            "(TOP (S (NP (XX the) (XX dog)) (VP (XX barks)) (XX .)))",
            ("unclosed_brackets", "missing_word_slots"),
        ),
        (
            "(S XX XX )S )S )S XX XX",
            "(TOP (S (XX the) (XX dog)) (XX barks) (XX .))",
            ("extra_closing",),
        ),
        (
            "(S XX XX XX XX XX XX )S",
            "(TOP (S (XX the) (XX dog) (XX barks) (XX .)))",
            ("extra_word_slots",),
        ),
        (
            "(S (NP )NP XX XX (VP )VP XX XX )S",
            "(TOP (S (XX the) (XX dog) (XX barks) (XX .)))",
            ("empty_constituents",),
        ),
        # Words after the last phrase (after an extra closing bracket): the missing words
        # follow them; put into the phrase, they would come out of order (the flat fallback).
        ("(S XX )S XX", "(TOP (S (XX the)) (XX dog) (XX barks) (XX .))", ("missing_word_slots",)),
        (
            "(S XX )S )S XX",
            "(TOP (S (XX the)) (XX dog) (XX barks) (XX .))",
            ("extra_closing", "missing_word_slots"),
        ),
        # No phrase at all: an S over every word.
        ("", "(TOP (S (XX the) (XX dog) (XX barks) (XX .)))", ("missing_word_slots",)),
        (
            ")S XX )S",
            "(TOP (S (XX the) (XX dog) (XX barks) (XX .)))",
            ("extra_closing", "missing_word_slots"),
        ),
    ],
)
def test_repairs_by_hand(sequence, expected, repairs):
    result = Linearizer().delinearize(sequence, WORDS)
    assert str(result.tree) == expected
    assert result.repairs == repairs
    assert result.repaired


def test_random_token_sequences_always_give_a_tree_over_the_words():
    rng = random.Random(20240601)
    vocabulary = [
        "(S",
        "(NP",
        "(VP",
        "(PP",
        ")S",
        ")NP",
        ")VP",
        ")",
        "(",
        "XX",
        "NN",
        "<unk>",
        ")PP",
        "(SBAR",
    ]
    seen = set()
    for linearizer in (Linearizer(), Linearizer(pos_tags=True, closing_labels=False)):
        for _ in range(2000):
            words = [f"w{i}" for i in range(rng.randint(0, 12))]
            tokens = [rng.choice(vocabulary) for _ in range(rng.randint(0, 40))]
            result = linearizer.delinearize(tokens, words)
            seen.update(result.repairs)
            tree = result.tree
            assert tree.label == "TOP"
            assert tree.leaves() == words
            # Well formed: it prints and reads back to the same tree, every phrase has words.
            assert str(tree) == str(parse_tree(str(tree)))
            stack = list(tree.children)
            while stack:
                node = stack.pop()
                assert node.children, str(tree)
                if not node.is_preterminal():
                    stack.extend(node.children)
    # The last resort is never needed: every repair keeps the words in order.
    assert seen == set(REPAIRS) - {"flat_fallback"}


@pytest.mark.parametrize(
    "linearizer", [Linearizer(), Linearizer(pos_tags=True, closing_labels=False)]
)
def test_words_with_brackets_round_trip_through_the_written_tree(linearizer):
    # linearize -> delinearize -> str -> read: one tree over the same number of words, each
    # spelled as the treebank does (by hand: '(' -> -LRB-, ')' -> -RRB-).
    words = [":-)", "(a", "a)b", "(", ")"]
    tree = Tree(
        "TOP",
        [
            Tree(
                "S",
                [
                    Tree("NP", [Tree("NN", [words[0]]), Tree("NN", [words[1]])]),
                    Tree("VP", [Tree("VBZ", [words[2]]), Tree("NN", [words[3]])]),
                    Tree(".", [words[4]]),
                ],
            )
        ],
    )
    result = linearizer.delinearize(linearizer.linearize(tree), words)
    assert result.repairs == ()
    read = parse_tree(str(result.tree))
    assert read.leaves() == [":--RRB-", "-LRB-a", "a-RRB-b", "-LRB-", "-RRB-"]
    assert str(read) == str(result.tree)
    expected_tags = ["NN", "NN", "VBZ", "NN", "."] if linearizer.pos_tags else [WORD_SLOT] * 5
    assert [tag for _, tag in read.pos()] == expected_tags


def test_word_slots_take_the_input_words_whatever_was_copied():
    linearizer = Linearizer(word_slots=True)
    # A miscopied word still fills its slot with the input word; slots are counted as ever.
    result = linearizer.delinearize("(S (NP teh dgo )NP (VP barks )VP . )S", WORDS)
    assert result.repairs == ()
    assert str(result.tree) == "(TOP (S (NP (XX the) (XX dog)) (VP (XX barks)) (XX .)))"
    result = linearizer.delinearize("(S (NP the dog )NP barks", WORDS)
    assert str(result.tree) == "(TOP (S (NP (XX the) (XX dog)) (XX barks) (XX .)))"
    assert result.repairs == ("unclosed_brackets", "missing_word_slots")


def test_linearizer_settings():
    assert Linearizer.from_dict({"pos_tags": True, "closing_labels": False}) == Linearizer(
        pos_tags=True, closing_labels=False, word_slots=False
    )  # a parsing.json from before
    settings = Linearizer(word_slots=True).to_dict()
    assert settings == {"pos_tags": False, "closing_labels": True, "word_slots": True}
    assert Linearizer.from_dict(settings) == Linearizer(word_slots=True)
    with pytest.raises(ValueError, match="not both"):
        Linearizer(pos_tags=True, word_slots=True)


def test_tags_go_in_and_out():
    bare = without_tags(TREE)
    assert [tag for _, tag in bare.pos()] == [WORD_SLOT] * 4
    assert with_tags(bare, ["DT", "NN", "VBZ", "."]) == TREE
    with pytest.raises(ValueError):
        with_tags(bare, ["DT"])
    assert str(flat_tree(["a", "b"])) == "(TOP (S (XX a) (XX b)))"


@pytest.mark.parametrize("name", SHARED_TREE_FILES)
def test_round_trip_exact_on_every_shared_tree(data_dir, name):
    _, trees = shared_trees(data_dir, name)
    # Both choices of each option, in two passes (the suite must stay fast).
    for linearizer in (
        Linearizer(pos_tags=True),
        Linearizer(pos_tags=False, closing_labels=False),
        Linearizer(word_slots=True),
    ):
        for tree in trees:
            tokens = linearizer.linearize(tree)
            words = tree.leaves()
            if linearizer.word_slots:
                assert [t for t in tokens if t[0] not in "()"] == words
            else:
                assert tokens.count(WORD_SLOT) == (0 if linearizer.pos_tags else len(words))
            result = linearizer.delinearize(tokens, words)
            assert result.repairs == (), str(tree)
            assert result.tree == (tree if linearizer.pos_tags else without_tags(tree))
