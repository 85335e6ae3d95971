"""Constituency trees: reading Penn Treebank brackets, and the standard preprocessing.

`Tree` is a small immutable-by-convention node: a `label` and `children`, each child a `Tree`
or a word (`str`). `parse_tree` reads one bracketed tree; `read_trees` reads a file of them,
one tree per line (the shared `*.trees` files) or spread over several lines (`.mrg` files,
trees separated by their brackets). `preprocess` is the usual treatment for parsing
experiments (and EVALB's COLLINS.prm view of the gold trees): function tags and indices
stripped (`NP-SBJ-1` -> `NP`, `NP=2` -> `NP`), `-NONE-` elements and the constituents they
leave empty removed, and one `TOP` root (the treebank's nameless root `( (S ...))` and
`ROOT` are renamed; any other root is wrapped).

Why not `nltk.Tree`: it reads these brackets too, but errors would still have to be located
(file and line) by our own code around it, `.mrg` splitting would be ours too, and nltk brings
four more dependencies (click, joblib, regex, tqdm) for what is a 40-line reader here; nltk
stays optional (the `parsing` extra), for `keras-transformer parse --tokenize` only.

Bad input (unbalanced brackets, an empty line, text that is not a tree) raises one
`TreeSyntaxError` (a `UserInputError`) that names the file, the line and what to fix.

Brackets inside words and labels are written as the treebank spells them, `(` as `-LRB-`
and `)` as `-RRB-` (`escape_brackets`: `:-)` -> `:--RRB-`, as Stanford's PTB tokenizer
does), so that `str(tree)` is always one tree that reads back.

Example:
>>> tree = preprocess(parse_tree("( (S (NP-SBJ (-NONE- *)) (VP (VBZ is) (ADJP (JJ fine)))))"))
>>> str(tree)
'(TOP (S (VP (VBZ is) (ADJP (JJ fine)))))'
>>> tree.leaves()
['is', 'fine']
"""

import os
import re

from keras_transformer.errors import UserInputError

TOP = "TOP"
NONE_LABEL = "-NONE-"
# Roots that name the whole sentence: the treebank's nameless "( (S ...))", and ROOT of
# Stanford-style parser output (the GUM silver trees).
ROOT_LABELS = ("", "ROOT", TOP)

_TOKEN = re.compile(r"\(|\)|[^\s()]+")
BRACKET_ESCAPES = {"(": "-LRB-", ")": "-RRB-"}


def escape_brackets(text):
    """`text` with every `(` and `)` in it spelled as the Penn Treebank does.

    A bracket in a word or label would end or open a constituent when the tree is read back;
    the treebank writes the words `(` and `)` as `-LRB-` and `-RRB-`, and brackets inside a
    word the same way.

    Example:
    >>> escape_brackets("("), escape_brackets(":-)"), escape_brackets("dog")
    ('-LRB-', ':--RRB-', 'dog')
    """
    if "(" not in text and ")" not in text:
        return text
    return text.replace("(", BRACKET_ESCAPES["("]).replace(")", BRACKET_ESCAPES[")"])


class TreeSyntaxError(UserInputError):
    """A bracketed tree that cannot be read; the message names where and what to fix."""


class Tree:
    """One constituent: a label and its children (`Tree`s, or words as `str`).

    Args:
        label: the constituent or part-of-speech label ("" for the treebank's nameless root).
        children: a list of `Tree` and/or `str` (a preterminal has one `str` child).

    Example:
    >>> Tree("NP", [Tree("DT", ["the"]), Tree("NN", ["dog"])]).leaves()
    ['the', 'dog']
    """

    __slots__ = ("label", "children")

    def __init__(self, label, children):
        self.label = label
        self.children = list(children)

    def is_preterminal(self):
        return len(self.children) == 1 and isinstance(self.children[0], str)

    def leaves(self):
        """The words, left to right."""
        words = []
        for child in self.children:
            if isinstance(child, str):
                words.append(child)
            else:
                words.extend(child.leaves())
        return words

    def pos(self):
        """`(word, tag)` pairs of the preterminals, left to right."""
        pairs = []
        for child in self.children:
            if isinstance(child, Tree):
                if child.is_preterminal():
                    pairs.append((child.children[0], child.label))
                else:
                    pairs.extend(child.pos())
        return pairs

    def __str__(self):
        # Escaped, so that a word such as ':-)' cannot close a bracket when read back.
        parts = [
            escape_brackets(child) if isinstance(child, str) else str(child)
            for child in self.children
        ]
        label = escape_brackets(self.label)
        return f"({label} {' '.join(parts)})" if parts else f"({label})"

    def __repr__(self):
        return f"Tree({str(self)!r})"

    def __eq__(self, other):
        return (
            isinstance(other, Tree)
            and self.label == other.label
            and self.children == other.children
        )

    __hash__ = None


def _where(source, line):
    if source is None and line is None:
        return "tree"
    if source is None:
        return f"line {line}"
    return f"{source} line {line}" if line is not None else str(source)


def parse_tree(text, source=None, line=None):
    """Reads one bracketed tree, `(LABEL CHILD ...)` with words as leaves.

    Args:
        text: the tree, e.g. `(S (NP (DT the) (NN dog)) (VP (VBZ barks)))`.
        source, line: where it comes from, for error messages.

    Returns:
        A `Tree`.

    Raises:
        TreeSyntaxError: for an empty text, unbalanced brackets, a word outside any bracket,
            several trees, or `()`.
    """
    where = _where(source, line)
    tokens = _TOKEN.findall(text)
    if not tokens:
        raise TreeSyntaxError(
            f"{where}: empty line where a tree was expected; give one "
            "bracketed tree per line, e.g. (S (NP (NN it)) (VP (VBZ works)))"
        )
    if tokens[0] != "(":
        raise TreeSyntaxError(
            f"{where}: {tokens[0]!r} is not a tree: a tree starts with '(', "
            "e.g. (S (NP (NN it)) (VP (VBZ works)))"
        )
    stack = []
    root = None
    position = 0
    while position < len(tokens):
        token = tokens[position]
        if token == "(":
            if root is not None:
                raise TreeSyntaxError(
                    f"{where}: text after the end of the tree (token "
                    f"{position + 1}); give one tree per line, or check for "
                    "one ')' too many"
                )
            label = ""
            if position + 1 < len(tokens) and tokens[position + 1] not in "()":
                label = tokens[position + 1]
                position += 1
            stack.append(Tree(label, []))
        elif token == ")":
            if not stack:
                raise TreeSyntaxError(
                    f"{where}: unbalanced brackets: ')' at token {position + 1}"
                    " closes nothing; remove it or add the missing '('"
                )
            node = stack.pop()
            if not node.children and not node.label:
                raise TreeSyntaxError(
                    f"{where}: '()' is not a constituent; give it a label and children"
                )
            if stack:
                stack[-1].children.append(node)
            else:
                root = node
        else:
            if not stack:
                raise TreeSyntaxError(
                    f"{where}: word {token!r} outside any bracket; a tree "
                    "is one bracketed expression"
                )
            stack[-1].children.append(token)
        position += 1
    if stack:
        raise TreeSyntaxError(
            f"{where}: unbalanced brackets: {len(stack)} '(' not closed; add "
            "the missing ')' (a tree must fit on its line unless the file "
            "is .mrg)"
        )
    return root


def _tree_chunks(lines):
    """Multi-line trees (`.mrg`): yields `(first_line_number, text)` per balanced tree."""
    chunk, depth, start = [], 0, None
    for number, text in enumerate(lines, 1):
        if not chunk and not text.strip():
            continue
        if start is None:
            start = number
        chunk.append(text)
        depth += text.count("(") - text.count(")")
        if depth <= 0:
            yield start, " ".join(chunk)
            chunk, depth, start = [], 0, None
    if chunk:
        yield start, " ".join(chunk)  # unbalanced: parse_tree reports it


def read_text_lines(path):
    """The lines of a UTF-8 file, split on \\n (a trailing empty line is not a line).

    Raises:
        UserInputError: when the file cannot be read or is not UTF-8.
    """
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.read().split("\n")
    except OSError as error:
        raise UserInputError(f"cannot read {path!r}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise UserInputError(f"{path!r} is not UTF-8 text ({error.reason})") from None
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def read_trees(path, one_per_line=None):
    """Reads every tree of a file.

    Args:
        path: a UTF-8 file of bracketed trees.
        one_per_line: True: one tree per line, an empty line is an error (the shared
            `*.trees` files); False: trees may span lines and blank lines separate them
            (`.mrg`); None: False for `.mrg` files, else True.

    Returns:
        A list of `Tree`s, as read (see `preprocess`).

    Raises:
        TreeSyntaxError: naming the file and line of the first bad tree.
        UserInputError: when the file cannot be read.
    """
    path = os.fspath(path)
    if one_per_line is None:
        one_per_line = not path.endswith(".mrg")
    lines = read_text_lines(path)
    if one_per_line:
        return [parse_tree(text, path, number) for number, text in enumerate(lines, 1)]
    return [parse_tree(text, path, number) for number, text in _tree_chunks(lines)]


def strip_function_tags(label):
    """`NP-SBJ-1` -> `NP`, `NP=2` -> `NP`; labels that start with '-' (`-NONE-`, `-LRB-`)
    are kept whole."""
    if label.startswith("-"):
        return label
    return re.split(r"[-=]", label, maxsplit=1)[0] or label


def _strip(tree):
    """Function tags off, -NONE- elements and emptied constituents out (None if all empty)."""
    if tree.is_preterminal():
        if tree.label == NONE_LABEL:
            return None
        return Tree(strip_function_tags(tree.label), tree.children)
    children = []
    for child in tree.children:
        if isinstance(child, str):
            children.append(child)
            continue
        kept = _strip(child)
        if kept is not None:
            children.append(kept)
    if not children:
        return None
    return Tree(strip_function_tags(tree.label), children)


def preprocess(tree):
    """The standard preprocessing for parsing: function tags and indices stripped, `-NONE-`
    elements and the constituents they leave empty removed, one `TOP` root.

    Args:
        tree: a `Tree` as read.

    Returns:
        A new `Tree` rooted in `TOP` (the input is not changed).

    Raises:
        UserInputError: when nothing but `-NONE-` elements is left (no words).
    """
    stripped = _strip(tree)
    if stripped is None:
        raise UserInputError(f"tree {tree} has no words once -NONE- elements are removed")
    if tree.label in ROOT_LABELS and not stripped.is_preterminal():
        return Tree(TOP, stripped.children)
    return Tree(TOP, [stripped])


def merge_same_label_unaries(tree):
    """A copy of `tree` in which a constituent whose only child is a constituent of the same
    label is merged with that child: `(NP (NP (DT the) (NN dog)))` -> `(NP (DT the) (NN dog))`.

    The treebank has few of these (5 in the 273 preprocessed WSJ dev trees) and a parser's
    extra one is a bracket EVALB counts wrong: the parser merges them in its outputs.

    Example:
    >>> str(merge_same_label_unaries(parse_tree("(TOP (S (NP (NP (NN it))) (VP (VP (VBZ is)))))")))
    '(TOP (S (NP (NN it)) (VP (VBZ is))))'
    """
    if isinstance(tree, str) or tree.is_preterminal():
        return tree
    children = tree.children
    while (
        len(children) == 1
        and isinstance(children[0], Tree)
        and not children[0].is_preterminal()
        and children[0].label == tree.label
    ):
        children = children[0].children
    return Tree(tree.label, [merge_same_label_unaries(child) for child in children])


def phrase_subtrees(tree, min_words=2):
    """Every phrase of a TOP-rooted tree, as a TOP-rooted tree of its own: data augmentation
    from the gold trees alone (each phrase is a smaller parsing example of the same grammar).

    Preterminals, phrases of fewer than `min_words` words, and the phrase that spans the
    whole sentence (the tree itself) are left out.

    Example:
    >>> tree = parse_tree("(TOP (S (NP (DT A) (NN dog)) (VP (VBZ barks) (PP (IN at) (NP (PRP me))))))")
    >>> for phrase in phrase_subtrees(tree):
    ...     print(phrase)
    (TOP (NP (DT A) (NN dog)))
    (TOP (VP (VBZ barks) (PP (IN at) (NP (PRP me)))))
    (TOP (PP (IN at) (NP (PRP me))))
    """
    words = len(tree.leaves())
    found = []

    def visit(node):
        for child in node.children:
            if isinstance(child, Tree) and not child.is_preterminal():
                span = len(child.leaves())
                if min_words <= span < words:
                    found.append(Tree(TOP, [child]))
                visit(child)

    visit(tree)
    return found


def read_preprocessed(path, one_per_line=None):
    """`read_trees` then `preprocess` on each tree (errors name the file and line)."""
    path = os.fspath(path)
    trees = read_trees(path, one_per_line)
    result = []
    for number, tree in enumerate(trees, 1):
        try:
            result.append(preprocess(tree))
        except UserInputError as error:
            raise UserInputError(f"{path} tree {number}: {error}") from None
    return result
