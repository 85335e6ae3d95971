"""Tests of keras_transformer.parsing.constrained_decoding: the search's outputs against a plain
Python statement of the tree rules (greedy step by step, beam search against exhaustive
enumeration), well-formedness under random distributions for every linearization, and the
fallback when the cap leaves no room for a tree."""

import math

import numpy as np
import pytest
from keras import ops

from keras_transformer.decoding import BeamSearch, greedy_search, is_hypothesis
from keras_transformer.parsing.constrained_decoding import TreeConstrainedDecoder, TreeConstraint
from keras_transformer.parsing.linearization import Linearizer
from tests._decoding_fixtures import BOS, EOS, PAD, MarkovDecoder

S = "\u2581"
PIECES = [
    "<pad>",
    "<unk>",
    "<s>",
    "</s>",
    S + "(S",
    S + ")S",
    S + "(NP",
    S + ")NP",
    S + "(VP",
    S + ")VP",
    S + "(PP",
    S + ")",
    S + "XX",
    S + "NN",
    S + "VBZ",
    S + "the",
    S + "dog",
    S + "bark",
    "s",
    S + ".",
    "ed",
    S + "(ADJP",
]  # (ADJP has no )ADJP: never opened
IDS = {piece: i for i, piece in enumerate(PIECES)}
# "the dog barks ." as the source encodes it: bark + s is one word in two pieces.
WORDS = [IDS[S + "the"], IDS[S + "dog"], IDS[S + "bark"], IDS["s"], IDS[S + "."]]


def openings(linearizer):
    """(PP and (ADJP have no labelled closing piece: openings only with bare closings."""
    labels = ("S", "NP", "VP") + (() if linearizer.closing_labels else ("PP", "ADJP"))
    return [IDS[S + "(" + label] for label in labels]


def closing_of(opening, linearizer):
    label = PIECES[opening][2:]
    return IDS[S + ")" + label] if linearizer.closing_labels else IDS[S + ")"]


def allowed_next(output, source, linearizer, cap, max_depth=64, in_a_row=4):
    """The tree rules of the module docstring, stated over token lists: the token ids that may
    follow `output` (the tokens so far) for the source pieces `source` (eos excluded)."""
    stack, placed = [], 0
    for token in output:
        if token in openings(linearizer):
            stack.append(closing_of(token, linearizer))
        elif PIECES[token][1:2] == ")":
            stack = stack[:-1]  # (a closing of nothing: only an unconstrained step emits it)
        else:
            placed += 1
    if linearizer.word_slots:
        units = source
        slots = None
    else:
        units = [t for t in source if PIECES[t].startswith(S)]  # one slot per word
        slots = (
            [IDS[S + "XX"]]
            if not linearizer.pos_tags
            else [
                IDS[S + "XX"],
                IDS[S + "NN"],
                IDS[S + "VBZ"],
                IDS[S + "the"],
                IDS[S + "dog"],
                IDS[S + "bark"],
                IDS[S + "."],
            ]
        )
    left = len(units) - placed
    if linearizer.word_slots and left and placed and not PIECES[units[placed]].startswith(S):
        return {units[placed]}  # within a word
    allowed = set()
    if left and stack:
        allowed |= {units[placed]} if linearizer.word_slots else set(slots)
    run = 0
    while run < len(output) and output[len(output) - 1 - run] in openings(linearizer):
        run += 1
    if (
        left
        and len(stack) < max_depth
        and run < in_a_row
        and len(output) + 1 + left + len(stack) + 2 <= cap
    ):
        allowed |= set(openings(linearizer))
    just_opened = bool(output) and output[-1] in openings(linearizer)
    if stack and not just_opened and (len(stack) > 1 or not left):
        allowed.add(stack[-1])
    if not stack and not left:
        allowed.add(EOS)
    return allowed


def reference_greedy(table, source, linearizer, cap, **limits):
    """Greedy search under `allowed_next`; a step where nothing is allowed is unconstrained."""
    output, previous = [], BOS
    while len(output) < cap and (not output or output[-1] != EOS):
        allowed = allowed_next(output, source, linearizer, cap, **limits) or (
            set(range(len(PIECES))) - {PAD, BOS}
        )
        previous = max(allowed, key=lambda t, p=previous: table[p, t])
        output.append(previous)
    return output


def random_table(seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(len(PIECES), len(PIECES))) * 2.0
    logits[:, [PAD, BOS]] = -30.0
    return logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))


def constrained(table, linearizer, max_extra_length, opening_penalty=0.0, **limits):
    return TreeConstrainedDecoder(
        MarkovDecoder(table, max_length=64),
        TreeConstraint(PIECES, linearizer, **limits),
        max_extra_length,
        opening_penalty=opening_penalty,
    )


def outputs(result):
    ids = ops.convert_to_numpy(result.ids)
    lengths = ops.convert_to_numpy(result.lengths)
    scores = ops.convert_to_numpy(result.scores)
    return [
        [
            ids[b, h, : lengths[b, h]].tolist()
            for h in range(ids.shape[1])
            if is_hypothesis(scores[b, h])
        ]
        for b in range(ids.shape[0])
    ]


def as_text(tokens):
    return " ".join(
        PIECES[t][1:] if PIECES[t].startswith(S) else "+" + PIECES[t] for t in tokens if t != EOS
    )


LINEARIZERS = [
    Linearizer(word_slots=True),
    Linearizer(word_slots=True, closing_labels=False),
    Linearizer(),
    Linearizer(pos_tags=True, closing_labels=False),
]


@pytest.mark.parametrize("linearizer", LINEARIZERS, ids=["copy", "copy-bare", "xx", "pos-bare"])
def test_greedy_follows_the_rules_step_by_step(linearizer):
    sources = [WORDS, WORDS[:2], [IDS[S + "dog"], IDS[S + "bark"], IDS["ed"]]]
    batch = np.full((len(sources), 8), PAD, "int32")
    for row, source in enumerate(sources):
        batch[row, : len(source) + 1] = source + [EOS]
    for seed in range(4):
        table = random_table(seed)
        result = greedy_search(constrained(table, linearizer, 12), batch, max_extra_length=12)
        for source, (got,) in zip(sources, outputs(result)):
            expected = reference_greedy(table, source, linearizer, len(source) + 1 + 12)
            assert got == expected, (seed, as_text(got), as_text(expected))
            assert got[-1] == EOS


@pytest.mark.parametrize("depth, in_a_row", [(64, 4), (64, 2), (3, 6)])
def test_a_model_that_loves_openings_is_held_to_the_limits(depth, in_a_row):
    # Openings (and most of all "(NP") get the mass: the search must stop opening at the
    # limits, as the rules say, and still end with a tree over all the words.
    linearizer = Linearizer(word_slots=True)
    table = random_table(5)
    table[:, openings(linearizer)] += 8.0
    table[:, IDS[S + "(NP"]] += 2.0
    batch = np.array([WORDS + [EOS]], "int32")
    result = greedy_search(
        constrained(table, linearizer, 60, max_depth=depth, max_openings_in_a_row=in_a_row),
        batch,
        max_extra_length=60,
    )
    ((got,),) = outputs(result)
    expected = reference_greedy(
        table, WORDS, linearizer, len(WORDS) + 61, max_depth=depth, in_a_row=in_a_row
    )
    assert got == expected, (as_text(got), as_text(expected))
    text = as_text(got)
    assert ("(NP " * min(depth, in_a_row)) in text and ("(NP " * (in_a_row + 1)) not in text
    assert linearizer.delinearize(text.replace(" +", ""), "the dog barks .".split()).repairs == ()


def best_by_enumeration(table, source, linearizer, cap, opening_penalty=0.0):
    """The best-scoring well-formed output within the cap, scored as the search scores them
    (log-probability less the penalty per opening, over section 7's length penalty)."""
    best, frontier, complete = None, [[]], 0
    while frontier:
        grown = []
        for prefix in frontier:
            for token in allowed_next(prefix, source, linearizer, cap):
                sequence = prefix + [token]
                if token == EOS:
                    complete += 1
                    log_prob = sum(table[p, t] for p, t in zip([BOS] + sequence, sequence))
                    log_prob -= opening_penalty * sum(t in openings(linearizer) for t in sequence)
                    score = log_prob / ((5 + len(sequence)) / 6) ** 0.3
                    if best is None or score > best[0]:
                        best = (score, sequence)
                elif len(sequence) < cap:
                    grown.append(sequence)
        frontier = grown
    return best, complete


@pytest.mark.parametrize("opening_penalty", [0.0, 6.0, -3.0])
def test_beam_search_finds_the_best_well_formed_tree_by_enumeration(opening_penalty):
    linearizer = Linearizer(word_slots=True)
    source = [IDS[S + "dog"], IDS[S + "bark"], IDS["s"]]
    cap = len(source) + 1 + 6
    table = random_table(11)
    best, complete = best_by_enumeration(table, source, linearizer, cap, opening_penalty)
    assert complete > 10  # (S dog bark s )S, (S (NP dog )NP bark s )S, ...
    if opening_penalty:  # the penalty changes the best tree, in the direction it should
        unpenalized = best_by_enumeration(table, source, linearizer, cap)[0][1]
        count = [sum(t in openings(linearizer) for t in s) for s in (best[1], unpenalized)]
        assert (count[0] < count[1]) if opening_penalty > 0 else (count[0] > count[1]), count
    batch = np.array([source + [EOS]], "int32")
    result = BeamSearch(beam_size=64, alpha=0.3, max_extra_length=6)(
        constrained(table, linearizer, 6, opening_penalty=opening_penalty), batch
    )
    assert outputs(result)[0][0] == best[1], (as_text(outputs(result)[0][0]), as_text(best[1]))
    assert math.isclose(float(ops.convert_to_numpy(result.scores)[0, 0]), best[0], rel_tol=1e-5)


def test_greedy_with_an_opening_penalty_is_greedy_on_the_penalized_model():
    linearizer = Linearizer(word_slots=True)
    batch = np.array([WORDS + [EOS]], "int32")
    for seed in range(3):
        table = random_table(20 + seed)
        table[:, openings(linearizer)] += 1.5  # a model that over-brackets
        penalized = table.copy()
        penalized[:, openings(linearizer)] -= 1.5
        result = greedy_search(
            constrained(table, linearizer, 12, opening_penalty=1.5), batch, max_extra_length=12
        )
        ((got,),) = outputs(result)
        expected = reference_greedy(penalized, WORDS, linearizer, len(WORDS) + 13)
        assert got == expected, (seed, as_text(got), as_text(expected))
    with pytest.raises(ValueError, match="finite"):
        constrained(table, linearizer, 12, opening_penalty=float("nan"))


@pytest.mark.parametrize("linearizer", LINEARIZERS, ids=["copy", "copy-bare", "xx", "pos-bare"])
def test_every_beam_output_is_a_well_formed_tree_over_the_words(linearizer):
    words = ["the", "dog", "barks", "."]
    batch = np.array([WORDS + [EOS], WORDS[2:] + [EOS, PAD, PAD]], "int32")
    for seed in range(3):
        result = BeamSearch(beam_size=5, alpha=0.3, max_extra_length=15, num_hypotheses=5)(
            constrained(random_table(100 + seed), linearizer, 15), batch
        )
        for hypotheses, sentence in zip(outputs(result), (words, words[2:])):
            assert len(hypotheses) == 5
            for tokens in hypotheses:
                assert tokens[-1] == EOS
                text = as_text(tokens).replace(" +", "")  # pieces joined into words
                tree = linearizer.delinearize(text, sentence)
                assert tree.repairs == (), text
                if linearizer.word_slots:
                    assert [t for t in text.split() if t[0] not in "()"] == sentence


def test_a_cap_too_short_for_a_tree_leaves_those_steps_unconstrained():
    # Input + 1 cannot hold "(S dog )S" and eos: where nothing is allowed, nothing is
    # forbidden (no dead hypothesis, no error; the repair mends the output).
    table = random_table(3)
    batch = np.array([[IDS[S + "dog"], EOS]], "int32")
    linearizer = Linearizer(word_slots=True)
    result = greedy_search(constrained(table, linearizer, 1), batch, max_extra_length=1)
    ((got,),) = outputs(result)
    assert not allowed_next([], [IDS[S + "dog"]], linearizer, 3)
    assert got == reference_greedy(table, [IDS[S + "dog"]], linearizer, 3)
    assert got[0] == int(
        np.argmax(np.where(np.isin(np.arange(len(PIECES)), [PAD, BOS]), -np.inf, table[BOS]))
    )


def test_the_tables_and_bad_vocabularies():
    constraint = TreeConstraint(PIECES, Linearizer(word_slots=True))
    assert np.flatnonzero(constraint.opening).tolist() == [
        IDS[S + "(S"],
        IDS[S + "(NP"],
        IDS[S + "(VP"],
    ]
    assert constraint.closing[IDS[S + "(NP"]] == IDS[S + ")NP"]
    assert constraint.closing[IDS[S + "(ADJP"]] == -1  # no closing piece: never opened
    bare = TreeConstraint(PIECES, Linearizer(closing_labels=False))
    assert np.flatnonzero(bare.opening).tolist() == sorted(openings(bare.linearizer))
    assert set(bare.closing[bare.opening].tolist()) == {IDS[S + ")"]}
    assert np.flatnonzero(bare.slot).tolist() == [IDS[S + "XX"]]
    with pytest.raises(ValueError, match="no bracket pieces"):
        TreeConstraint(["<pad>", "<unk>", "<s>", "</s>", S + "dog"], Linearizer())
    with pytest.raises(ValueError, match="no word slot piece"):
        TreeConstraint(["<pad>", "<unk>", "<s>", "</s>", S + "(S", S + ")S"], Linearizer())
    with pytest.raises(TypeError, match="constrained=False"):
        TreeConstraint.for_vocabulary(object(), Linearizer())
