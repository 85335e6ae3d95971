"""Trees as token sequences and back, as Vinyals et al. (2015), "Grammar as a Foreign Language".

The parser translates words into a depth-first bracket sequence of the tree:

    (TOP (S (NP (DT the) (NN dog)) (VP (VBZ barks))))
    -> (S (NP XX XX )NP (VP XX )VP )S

Each constituent opens with `(LABEL` and closes with `)LABEL`; each word is one slot token,
`XX` (`pos_tags=False`, Vinyals et al.'s choice: the parser predicts no tags), its POS tag
(`pos_tags=True`) or the word itself (`word_slots=True`: the decoder copies each input word
where it belongs, so that every structural decision sees which words it has placed, at the
price of longer outputs); `closing_labels=False` closes every constituent with a bare `)`.
The TOP root is implied: the sequence holds TOP's children. These choices are options of
`Linearizer`, recorded in a run's `parsing.json`; the defaults are Vinyals et al.'s.
Whatever the slots hold, the parser's trees carry the input words (a copied word that came
out wrong still fills its slot) and `XX` tags unless the slots are POS tags.

`Linearizer.delinearize` turns **any** token sequence into a well-formed tree over exactly
the given words, never raising: closing brackets that close nothing are dropped, brackets
left open are closed, word slots beyond the words are dropped, words without a slot are
attached to the last top-level constituent when it ends the sequence (after top-level words
they follow those words; when there is no constituent at all, an `S` is put over all
words), constituents left without words are removed, and
when all that does not give a tree over the words (it always should) a flat
`(TOP (S (XX w1) (XX w2) ...))` is the last resort. What was repaired is returned with the
tree, so that callers can report how many outputs needed it.

Example:
>>> from keras_transformer.parsing.trees import parse_tree
>>> linearizer = Linearizer()
>>> tree = parse_tree("(TOP (S (NP (DT the) (NN dog)) (VP (VBZ barks))))")
>>> " ".join(linearizer.linearize(tree))
'(S (NP XX XX )NP (VP XX )VP )S'
>>> result = linearizer.delinearize("(S (NP XX XX )NP (VP XX".split(), ["the", "dog", "barks"])
>>> str(result.tree), result.repairs
('(TOP (S (NP (XX the) (XX dog)) (VP (XX barks))))', ('unclosed_brackets',))
"""

import dataclasses

from keras_transformer.parsing.trees import TOP, Tree

WORD_SLOT = "XX"
# Repairs that `delinearize` may make, in the order they are checked.
REPAIRS = (
    "extra_closing",
    "unclosed_brackets",
    "extra_word_slots",
    "missing_word_slots",
    "empty_constituents",
    "flat_fallback",
)


@dataclasses.dataclass(frozen=True)
class Delinearized:
    """A tree read back from a token sequence.

    Args:
        tree: a `Tree` rooted in TOP whose leaves are exactly the input words.
        repairs: the names (of `REPAIRS`) of what had to be repaired; empty when the
            sequence was well formed.
    """

    tree: Tree
    repairs: tuple[str, ...] = ()

    @property
    def repaired(self):
        return bool(self.repairs)


@dataclasses.dataclass(frozen=True)
class Linearizer:
    """Trees <-> bracket token sequences.

    Args:
        pos_tags: word slots are POS tags (True) or `XX` (False, Vinyals et al.).
        closing_labels: closing brackets carry the label, `)NP` (True, Vinyals et al.), or
            are a bare `)` (False).
        word_slots: word slots are the words themselves (True) instead of `XX`; not
            together with `pos_tags`.

    Example:
    >>> Linearizer(pos_tags=True, closing_labels=False).linearize(
    ...     Tree("TOP", [Tree("NP", [Tree("NN", ["dogs"])])]))
    ['(NP', 'NN', ')']
    """

    pos_tags: bool = False
    closing_labels: bool = True
    word_slots: bool = False

    def __post_init__(self):
        if self.pos_tags and self.word_slots:
            raise ValueError(
                "a word slot holds its POS tag (pos_tags) or its word "
                "(word_slots), not both: choose one"
            )

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values):
        # Settings written before word_slots existed lack the key: XX or POS slots then.
        return cls(
            **{k: values[k] for k in ("pos_tags", "closing_labels", "word_slots") if k in values}
        )

    # -- tree -> tokens ----------------------------------------------------------------------

    def linearize(self, tree):
        """The token sequence of a preprocessed tree (TOP root implied, its children written).

        Args:
            tree: a `Tree` rooted in TOP (see `trees.preprocess`).

        Returns:
            A list of tokens.
        """
        tokens = []
        children = tree.children if tree.label == TOP else [tree]
        for child in children:
            self._write(child, tokens)
        return tokens

    def _write(self, node, tokens):
        if isinstance(node, str) or node.is_preterminal():
            label = node.label if isinstance(node, Tree) else WORD_SLOT
            word = node.children[0] if isinstance(node, Tree) else node
            tokens.append(word if self.word_slots else label if self.pos_tags else WORD_SLOT)
            return
        tokens.append("(" + node.label)
        for child in node.children:
            self._write(child, tokens)
        tokens.append(")" + node.label if self.closing_labels else ")")

    def target_text(self, tree):
        """`linearize` as one line, the target side of a training pair."""
        return " ".join(self.linearize(tree))

    # -- tokens -> tree ----------------------------------------------------------------------

    def delinearize(self, tokens, words):
        """A tree over exactly `words` from any token sequence; never raises.

        Args:
            tokens: the decoder output (a list of tokens, or a string split on whitespace).
            words: the input words, in order.

        Returns:
            A `Delinearized` (the tree and the repairs it needed).
        """
        if isinstance(tokens, str):
            tokens = tokens.split()
        words = [str(word) for word in words]
        repairs = set()
        root = Tree(TOP, [])
        stack = [root]
        next_word = 0
        for token in tokens:
            if token.startswith("("):
                node = Tree(token[1:] or "X", [])
                stack[-1].children.append(node)
                stack.append(node)
            elif token.startswith(")"):
                if len(stack) > 1:
                    stack.pop()
                else:
                    repairs.add("extra_closing")
            elif next_word < len(words):
                label = token if self.pos_tags else WORD_SLOT
                stack[-1].children.append(Tree(label, [words[next_word]]))
                next_word += 1
            else:
                repairs.add("extra_word_slots")
        if len(stack) > 1:
            repairs.add("unclosed_brackets")
        if next_word < len(words):
            repairs.add("missing_word_slots")
            missing = [Tree(WORD_SLOT, [w]) for w in words[next_word:]]
            if all(c.is_preterminal() for c in root.children):
                # No phrase at all: a sentence node over everything, as the flat fallback.
                root.children = [Tree("S", root.children + missing)]
            elif not root.children[-1].is_preterminal():
                root.children[-1].children.extend(missing)
            else:
                # Words after the last phrase: the missing ones follow them, in order (put
                # into the last phrase they would come before those words).
                root.children.extend(missing)
        if _prune_empty(root):
            repairs.add("empty_constituents")
        if root.leaves() != words:  # cannot happen by construction; kept as the last resort
            repairs.add("flat_fallback")
            root = flat_tree(words)
        return Delinearized(root, tuple(r for r in REPAIRS if r in repairs))


def _prune_empty(node):
    """Removes constituents without words below `node`; True when any was removed."""
    removed = False
    kept = []
    for child in node.children:
        if isinstance(child, Tree) and not child.is_preterminal():
            removed |= _prune_empty(child)
            if not child.children:
                removed = True
                continue
        kept.append(child)
    node.children = kept
    return removed


def flat_tree(words, label="S"):
    """`(TOP (S (XX w1) (XX w2) ...))`: the tree of last resort (`(TOP)` for no words)."""
    if not words:
        return Tree(TOP, [])
    return Tree(TOP, [Tree(label, [Tree(WORD_SLOT, [w]) for w in words])])


def with_tags(tree, tags):
    """A copy of `tree` whose preterminal labels are `tags`, left to right.

    Puts known POS tags into a parser output with `XX` slots, e.g. the gold tags before EVALB
    scoring: EVALB deletes punctuation by its tag in each tree, and F1 does not count tags.

    Raises:
        ValueError: when the tree has not one preterminal per tag.
    """
    tags = list(tags)
    position = [0]

    def copy(node):
        if isinstance(node, str):
            return node
        if node.is_preterminal():
            if position[0] >= len(tags):
                raise ValueError(f"{len(tags)} tags for a tree with more words: {tree}")
            position[0] += 1
            return Tree(tags[position[0] - 1], node.children)
        return Tree(node.label, [copy(child) for child in node.children])

    result = copy(tree)
    if position[0] != len(tags):
        raise ValueError(f"{len(tags)} tags for a tree of {position[0]} words: {tree}")
    return result


def without_tags(tree):
    """A copy of `tree` with every preterminal labelled `XX`."""
    return with_tags(tree, [WORD_SLOT] * len(tree.pos()))
