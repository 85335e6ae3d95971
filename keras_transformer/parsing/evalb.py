"""EVALB's bracket scoring (Sekine and Collins, 1997), with the semantics of its `COLLINS.prm`.

A re-implementation, from the rules of `evalb.c` (the 2006 version with the Brown fix, as in
nikitakit/self-attentive-parser's `EVALB/`), of what the parsing literature reports:

- each line of the gold and the test file is one tree, read as EVALB reads it: a bracket
  whose first element is followed by one word and `)` is a preterminal (tag and word), every
  other bracket is a constituent spanning the words read between its brackets;
- preterminals whose tag is a `DELETE_LABEL` (`TOP`, `-NONE-`, and the punctuation tags
  `, : `` '' .` in COLLINS.prm) are removed with their word, in each tree by its own tags;
  constituents left spanning no word, and constituents whose label is a `DELETE_LABEL`
  (`TOP`), are not counted;
- constituent labels lose their function tags (everything from the first `-` or `=`);
  `EQ_LABEL ADVP PRT` makes the two labels equal;
- brackets are matched one to one (same span and label; a gold bracket takes the first free
  test bracket), which gives EVALB's min(n, m) for repeated brackets;
- a test line with no words is a *skip* sentence; a sentence whose words differ in number or
  spelling from the gold (or that cannot be read) is an *error* sentence: both are counted
  and reported, and left out of the bracket figures, as EVALB does (which also stops after
  `MAX_ERROR` errors: here every sentence is scored and the errors are listed instead);
- the length of a sentence (for the `len<=40` figures) counts the gold words whose tag is not
  a `DELETE_LABEL_FOR_LENGTH` (`-NONE-`), punctuation included.

Not supported: `QUOTE_LABEL` (the quote re-insertion of `new.prm`; COLLINS.prm has none).

`tags_predicted=False` is for test trees whose tags the parser did not predict (`XX` word
slots, the gold tags put in for scoring by `with_gold_tags`): bracket figures
are the same, and tagging accuracy, which would read 100, is reported as not measured
(`None`, JSON `null`, `n/a` in the text).

Example:
>>> report = evaluate(["(S (NP (DT a) (NN b)) (VP (VB c)))"], ["(S (NP (DT a) (NN b) (VB c)))"])
>>> round(report.all.recall, 2), round(report.all.precision, 2)
(33.33, 50.0)
"""

import dataclasses
import json
import re

from keras_transformer.errors import UserInputError
from keras_transformer.parsing.linearization import WORD_SLOT, with_tags
from keras_transformer.parsing.trees import Tree, parse_tree, read_text_lines


@dataclasses.dataclass(frozen=True)
class EvalbParams:
    """The settings of an EVALB parameter (`.prm`) file.

    Args:
        labeled: LABELED 1 (labels must match) or 0.
        delete_labels: DELETE_LABEL entries.
        delete_labels_for_length: DELETE_LABEL_FOR_LENGTH entries.
        eq_labels: EQ_LABEL pairs (non-directional).
        eq_words: EQ_WORD pairs (non-directional).
        cutoff_len: CUTOFF_LEN, the length of the second summary.
    """

    labeled: bool = True
    delete_labels: tuple[str, ...] = ()
    delete_labels_for_length: tuple[str, ...] = ()
    eq_labels: tuple[tuple[str, str], ...] = ()
    eq_words: tuple[tuple[str, str], ...] = ()
    cutoff_len: int = 40

    def label_equal(self, a, b):
        return a == b or any((a, b) in ((x, y), (y, x)) for x, y in self.eq_labels)

    def word_equal(self, a, b):
        return a == b or any((a, b) in ((x, y), (y, x)) for x, y in self.eq_words)

    def is_deleted(self, label):
        return label in self.delete_labels


COLLINS = EvalbParams(
    labeled=True,
    delete_labels=("TOP", "-NONE-", ",", ":", "``", "''", "."),
    delete_labels_for_length=("-NONE-",),
    eq_labels=(("ADVP", "PRT"),),
    cutoff_len=40,
)


def read_params(path):
    """An `EvalbParams` from an EVALB `.prm` file (`#` lines are comments).

    Raises:
        UserInputError: for a missing file, an unknown keyword or QUOTE_LABEL.
    """
    values = {"delete_labels": [], "delete_labels_for_length": [], "eq_labels": [], "eq_words": []}
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.read().splitlines()
    except OSError as error:
        raise UserInputError(f"cannot read {path!r}: {error.strerror}") from None
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        key, args = fields[0], fields[1:]
        where = f"{path} line {number}"
        if key in ("DEBUG", "MAX_ERROR"):
            continue
        if key in ("EQ_LABEL", "EQ_WORD"):
            if len(args) != 2:
                raise UserInputError(f"{where}: {key} takes two values")
            values["eq_labels" if key == "EQ_LABEL" else "eq_words"].append(tuple(args))
        elif key in ("DELETE_LABEL", "DELETE_LABEL_FOR_LENGTH") and len(args) == 1:
            values[key.lower().replace("label", "labels", 1)].append(args[0])
        elif key in ("LABELED", "CUTOFF_LEN") and len(args) == 1 and args[0].isdigit():
            values["labeled" if key == "LABELED" else "cutoff_len"] = int(args[0])
        else:
            raise UserInputError(
                f"{where}: {' '.join(fields)!r} is not a supported EVALB "
                "setting (DELETE_LABEL, DELETE_LABEL_FOR_LENGTH, EQ_LABEL, "
                "EQ_WORD, LABELED, CUTOFF_LEN, DEBUG, MAX_ERROR)"
            )
    return EvalbParams(
        labeled=bool(values.get("labeled", 1)),
        delete_labels=tuple(values["delete_labels"]),
        delete_labels_for_length=tuple(values["delete_labels_for_length"]),
        eq_labels=tuple(values["eq_labels"]),
        eq_words=tuple(values["eq_words"]),
        cutoff_len=values.get("cutoff_len", 40),
    )


# -- one sentence ------------------------------------------------------------------------------


@dataclasses.dataclass
class _Read:
    terminals: list  # (word, tag) not deleted
    brackets: list  # [start, end, label]
    length: int  # words for the length cut-off
    problem: str | None


def _is_terminator(char):
    return char.isspace() or char in "()"


def _read_line(text, params):
    """EVALB's `read_line`: terminals, brackets (word spans), length, first problem."""
    terminals, brackets, stack = [], [], []
    length, problem = 0, None
    p, n = 0, len(text)
    while p < n:
        char = text[p]
        if char.isspace():
            p += 1
        elif char == "(":
            p += 1
            start = p
            while p < n and not _is_terminator(text[p]):
                p += 1
            label = text[start:p]
            if p < n and text[p].isspace():
                q = p
                while q < n and text[q].isspace():
                    q += 1
                word_start = q
                while q < n and not _is_terminator(text[q]):
                    q += 1
                word = text[word_start:q]
                if q < n and text[q] == ")":
                    if label not in params.delete_labels_for_length:
                        length += 1
                    if not params.is_deleted(label):
                        terminals.append((word, label))
                    p = q + 1
                    continue
                if q >= n or text[q] != "(":
                    problem = problem or "more than two elements in a bracket"
            stack.append(len(brackets))
            brackets.append([len(terminals), None, label])
        elif char == ")":
            if not stack:
                problem = problem or "unbalanced brackets (too many ')')"
            else:
                brackets[stack.pop()][1] = len(terminals)
            p += 1
        else:
            problem = problem or f"cannot read {char!r} outside a bracket"
            p += 1
    if stack:
        problem = problem or "unbalanced brackets (too many '(')"
        for index in stack:
            brackets[index][1] = len(terminals)
    return _Read(terminals, brackets, length, problem)


@dataclasses.dataclass(frozen=True)
class SentenceResult:
    """EVALB's line for one sentence.

    Args:
        id: 1-based line number.
        length: gold words for the cut-off (DELETE_LABEL_FOR_LENGTH removed).
        status: 0 valid, 1 error, 2 skip.
        matched, gold, test: matched brackets and bracket counts.
        crossing: test brackets that cross a gold bracket.
        words: scored words; correct_tags: of those, with the gold tag.
        message: why an error or skip sentence was not scored.
    """

    id: int
    length: int
    status: int
    matched: int = 0
    gold: int = 0
    test: int = 0
    crossing: int = 0
    words: int = 0
    correct_tags: int = 0
    message: str = ""

    @property
    def recall(self):
        return 100.0 * self.matched / self.gold if self.gold else 0.0

    @property
    def precision(self):
        return 100.0 * self.matched / self.test if self.test else 0.0

    def format(self, tags_predicted=True):
        tags = (
            f"{self.correct_tags:4d}   "
            f"{100.0 * self.correct_tags / self.words if self.words else 0.0:6.2f}"
            if tags_predicted
            else " n/a      n/a"
        )
        return (
            f"{self.id:4d}  {self.length:3d}    {self.status}  {self.recall:6.2f} "
            f"{self.precision:6.2f}   {self.matched:3d}    {self.gold:3d}  {self.test:3d}"
            f"    {self.crossing:3d}   {self.words:4d}  {tags}"
        )


def score_sentence(gold, test, params=COLLINS, id=1):
    """Scores one test tree against its gold tree (bracketed strings), as EVALB does."""
    gold_read, test_read = _read_line(gold, params), _read_line(test, params)
    problem = gold_read.problem and f"gold: {gold_read.problem}"
    problem = problem or (test_read.problem and f"test: {test_read.problem}")
    length = gold_read.length
    gold_words = [w for w, _ in gold_read.terminals]
    test_words = [w for w, _ in test_read.terminals]
    # Rows of unscored sentences show the gold word count, as EVALB's sample.rsl does; the
    # summaries count valid sentences only.
    if not test_words:
        return SentenceResult(
            id, length, 2, words=len(gold_words), message="no words in the test tree"
        )
    if len(gold_words) != len(test_words):
        return SentenceResult(
            id,
            length,
            1,
            words=len(gold_words),
            message=f"length unmatch ({len(gold_words)}|{len(test_words)})",
        )
    for g, t in zip(gold_words, test_words):
        if not params.word_equal(g, t):
            return SentenceResult(
                id, length, 1, words=len(gold_words), message=f"words unmatch ({g}|{t})"
            )

    def massage(brackets):
        result = []
        for start, end, label in brackets:
            label = re.split(r"[-=]", label, maxsplit=1)[0]
            deleted = start == end or any(
                params.label_equal(label, d) for d in params.delete_labels
            )
            result.append([start, end, label, not deleted, False])  # [.., counted, matched]
        return result

    gold_brackets, test_brackets = massage(gold_read.brackets), massage(test_read.brackets)
    matched = 0
    for g in gold_brackets:
        if not g[3]:
            continue
        for t in test_brackets:
            if (
                t[3]
                and not t[4]
                and g[0] == t[0]
                and g[1] == t[1]
                and (not params.labeled or params.label_equal(g[2], t[2]))
            ):
                t[4] = True
                matched += 1
                break
    counted_gold = [g for g in gold_brackets if g[3]]
    counted_test = [t for t in test_brackets if t[3]]
    crossing = sum(
        1
        for t in counted_test
        if any((g[0] < t[0] < g[1] < t[1]) or (t[0] < g[0] < t[1] < g[1]) for g in counted_gold)
    )
    correct = sum(
        1
        for (_, g), (_, t) in zip(gold_read.terminals, test_read.terminals)
        if params.label_equal(g, t)
    )
    return SentenceResult(
        id,
        length,
        1 if problem else 0,
        matched,
        len(counted_gold),
        len(counted_test),
        crossing,
        len(gold_words),
        correct,
        message=problem or "",
    )


# -- a corpus ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Summary:
    """EVALB's summary over a set of sentences (all, or those up to the cut-off length)."""

    sentences: int
    error_sentences: int
    skip_sentences: int
    matched: int
    gold_brackets: int
    test_brackets: int
    complete_match_sentences: int
    crossing: int
    no_crossing_sentences: int
    two_or_less_crossing_sentences: int
    words: int
    correct_tags: int
    tags_predicted: bool = True

    @classmethod
    def of(cls, results, tags_predicted=True):
        valid = [r for r in results if r.status == 0]
        return cls(
            sentences=len(results),
            error_sentences=sum(r.status == 1 for r in results),
            skip_sentences=sum(r.status == 2 for r in results),
            matched=sum(r.matched for r in valid),
            gold_brackets=sum(r.gold for r in valid),
            test_brackets=sum(r.test for r in valid),
            complete_match_sentences=sum(r.gold == r.test == r.matched for r in valid),
            crossing=sum(r.crossing for r in valid),
            no_crossing_sentences=sum(r.crossing == 0 for r in valid),
            two_or_less_crossing_sentences=sum(r.crossing <= 2 for r in valid),
            words=sum(r.words for r in valid),
            correct_tags=sum(r.correct_tags for r in valid),
            tags_predicted=tags_predicted,
        )

    @property
    def valid_sentences(self):
        return self.sentences - self.error_sentences - self.skip_sentences

    @property
    def recall(self):
        return 100.0 * self.matched / self.gold_brackets if self.gold_brackets else 0.0

    @property
    def precision(self):
        return 100.0 * self.matched / self.test_brackets if self.test_brackets else 0.0

    @property
    def f1(self):
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def _per_valid(self, count, scale=100.0):
        return scale * count / self.valid_sentences if self.valid_sentences else 0.0

    @property
    def complete_match(self):
        return self._per_valid(self.complete_match_sentences)

    @property
    def average_crossing(self):
        return self._per_valid(self.crossing, 1.0)

    @property
    def no_crossing(self):
        return self._per_valid(self.no_crossing_sentences)

    @property
    def two_or_less_crossing(self):
        return self._per_valid(self.two_or_less_crossing_sentences)

    @property
    def tagging_accuracy(self):
        """Percent of scored words with the gold tag; None when the tags were not predicted."""
        if not self.tags_predicted:
            return None
        return 100.0 * self.correct_tags / self.words if self.words else 0.0

    def format(self):
        rows = [
            ("Number of sentence", self.sentences),
            ("Number of Error sentence", self.error_sentences),
            ("Number of Skip  sentence", self.skip_sentences),
            ("Number of Valid sentence", self.valid_sentences),
        ]
        lines = [f"{name:<26}= {value:6d}" for name, value in rows]
        figures = [
            ("Bracketing Recall", self.recall),
            ("Bracketing Precision", self.precision),
            ("Bracketing FMeasure", self.f1),
            ("Complete match", self.complete_match),
            ("Average crossing", self.average_crossing),
            ("No crossing", self.no_crossing),
            ("2 or less crossing", self.two_or_less_crossing),
            ("Tagging accuracy", self.tagging_accuracy),
        ]
        lines += [
            f"{name:<26}= {'n/a' if value is None else format(value, '6.2f'):>6}"
            for name, value in figures
        ]
        return "\n".join(lines)

    def to_dict(self):
        return {
            "sentences": self.sentences,
            "error_sentences": self.error_sentences,
            "skip_sentences": self.skip_sentences,
            "valid_sentences": self.valid_sentences,
            "recall": round(self.recall, 2),
            "precision": round(self.precision, 2),
            "f1": round(self.f1, 2),
            "complete_match": round(self.complete_match, 2),
            "average_crossing": round(self.average_crossing, 2),
            "tagging_accuracy": (
                None if self.tagging_accuracy is None else round(self.tagging_accuracy, 2)
            ),
        }


@dataclasses.dataclass(frozen=True)
class EvalbReport:
    """The result of `evaluate`: per-sentence lines and the two summaries."""

    sentences: list[SentenceResult]
    all: Summary
    short: Summary
    cutoff_len: int
    tags_predicted: bool = True

    def problems(self):
        """`(line, status, message)` of every error and skip sentence."""
        return [(r.id, r.status, r.message) for r in self.sentences if r.status]

    def format(self, per_sentence=False):
        """EVALB's output: (optionally) the per-sentence table, then the summary."""
        lines = []
        if per_sentence:
            lines += [
                "  Sent.                        Matched  Bracket   Cross        Correct Tag",
                " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy",
                "=" * 76,
            ]
            lines += [r.format(self.tags_predicted) for r in self.sentences]
            lines.append("=" * 76)
            total = self.all
            if total.gold_brackets and total.test_brackets:
                lines.append(
                    f"                {total.recall:6.2f} {total.precision:6.2f} "
                    f"{total.matched:6d} {total.gold_brackets:5d} "
                    f"{total.test_brackets:5d}  {total.crossing:5d}  "
                    f"{total.words:5d} "
                    + (
                        f"{total.correct_tags:5d}   {total.tagging_accuracy:6.2f}"
                        if self.tags_predicted
                        else "  n/a      n/a"
                    )
                )
        lines += [
            "=== Summary ===",
            "",
            "-- All --",
            self.all.format(),
            "",
            f"-- len<={self.cutoff_len} --",
            self.short.format(),
        ]
        for line, status, message in self.problems():
            kind = "error" if status == 1 else "skip"
            lines.append(f"{kind} sentence at line {line}: {message}")
        return "\n".join(lines)

    def to_json(self, **extra):
        """One JSON line: the `All` figures, the `len<=N` ones under `len<=N`, and extras."""
        values = {**self.all.to_dict(), f"len<={self.cutoff_len}": self.short.to_dict(), **extra}
        return json.dumps(values, sort_keys=True)


def evaluate(gold, test, params=COLLINS, tags_predicted=True):
    """Scores test trees against gold trees, line by line, as EVALB does.

    Args:
        gold, test: equally long lists of bracketed trees (strings, or objects whose `str`
            is one, such as `Tree`); `None` or "" in `test` is a skip sentence.
        params: an `EvalbParams` (default: COLLINS.prm).
        tags_predicted: False when the test tags are not the parser's (`XX` slots filled
            with the gold tags): tagging accuracy is then `None`, not a meaningless 100.

    Returns:
        An `EvalbReport`.

    Raises:
        UserInputError: when the lists differ in length.
    """
    gold, test = list(gold), list(test)
    if len(gold) != len(test):
        raise UserInputError(
            f"{len(gold)} gold trees but {len(test)} test trees: the files "
            "must hold one tree per line for the same sentences"
        )
    results = [
        score_sentence(str(g), "" if t is None else str(t), params, id=number)
        for number, (g, t) in enumerate(zip(gold, test), 1)
    ]
    short = [r for r in results if r.length <= params.cutoff_len]
    return EvalbReport(
        results,
        Summary.of(results, tags_predicted),
        Summary.of(short, tags_predicted),
        params.cutoff_len,
        tags_predicted,
    )


def with_gold_tags(gold, test, replace_predicted=False):
    """The test trees with the gold tags in their `XX` word slots, when every tag of every
    test tree is `XX` (a parser that predicts no tags), and whether that was so.

    EVALB deletes punctuation by each tree's own tags: a test `(XX .)` would stay a word and
    make the sentence an error sentence. F1 counts no tags, so the gold ones change nothing
    else; score the result with `tags_predicted=False`. Test trees with any predicted tag are
    left alone, all of them: gold tags in some would make tagging accuracy meaningless.
    `replace_predicted=True` replaces predicted tags too: the bracket F1 of a parser that
    predicts tags, scored as an `XX` parser's (one mistagged comma would otherwise make its
    sentence an error sentence).

    Args:
        gold, test: line-aligned trees, `Tree`s or bracketed strings (`None` or "" in `test`
            is a skip sentence).
        replace_predicted: put the gold tags in whatever the test tags are.

    Returns:
        `(trees, filled)`. Filled: `test` as a list, each tree given the tags of its gold tree
        (a `Tree` for a `Tree`, a string for a string), except the trees EVALB will report
        as error sentences anyway (their gold tree unreadable or of another word count),
        which are left as given. Not filled (some test tag is not `XX`, no test tree has a
        word, or a test tree cannot be read): `list(test)` unchanged.
    """
    gold, test = list(gold), list(test)

    def read(tree):
        if isinstance(tree, Tree) or tree is None:
            return tree
        return parse_tree(tree) if tree.strip() else None

    try:
        trees = [read(tree) for tree in test]
    except UserInputError:
        return test, False  # EVALB reports the unreadable lines as error sentences
    tags = [tag for tree in trees if tree is not None for _, tag in tree.pos()]
    if not tags or (not replace_predicted and any(tag != WORD_SLOT for tag in tags)):
        return test, False
    result = []
    for gold_tree, given, tree in zip(gold, test, trees):
        try:
            gold_tree = read(gold_tree)
            if tree is None or gold_tree is None:
                raise ValueError("a skip sentence, or no gold tree")
            tagged = with_tags(tree, [tag for _, tag in gold_tree.pos()])
        except (UserInputError, ValueError):  # EVALB's error or skip sentence: as given
            result.append(given)
            continue
        result.append(tagged if isinstance(given, Tree) else str(tagged))
    return result + test[len(result) :], True


def evaluate_files(gold_path, test_path, params=COLLINS, tags_predicted=True):
    """`evaluate` on two files of one tree per line (`tags_predicted` as `evaluate`).

    Raises:
        UserInputError: when a file cannot be read, the gold file holds no tree, or the
            files differ in line count.
    """
    return evaluate(read_gold_lines(gold_path), read_text_lines(test_path), params, tags_predicted)


def read_gold_lines(path):
    """The lines of a gold file of one tree per line.

    Raises:
        UserInputError: when it cannot be read or holds no tree (every figure would be a
            meaningless 0).
    """
    gold = read_text_lines(path)
    if not any(line.strip() for line in gold):
        raise UserInputError(
            f"{path!r} holds no gold trees: give a file of one bracketed tree per line"
        )
    return gold
