"""One home for each figure: README's results agree with docs/results.md, and pages stay short.

README's "Current results" table and every other README line that links into the results page
quote figures whose home is docs/results.md. Each quoted figure must appear in the section the
line links to, and each commit the table names must be that section's, so that a figure
re-measured on the results page and left stale in the README (or the reverse) fails here.
"""

import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
RESULTS_LINK = re.compile(r"\]\(docs/results\.md#(?P<anchor>[a-z0-9-]+)\)")
# A figure: a number with a decimal point, a percentage or a ratio ("1.08", "99.0%", "0.67x").
FIGURE = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?=%|x\b)|(?<![\w.])\d+\.\d+(?![\d])")
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\d.]\d)")
COMMIT = re.compile(r"\b[0-9a-f]{7}\b")
LINE_LIMITS = {"docs/results.md": 415, "benchmarks/README.md": 300}


def slug(heading):
    """The anchor MkDocs's toc extension gives a heading."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"[\s]+", "-", text)


def results_sections(text):
    """Anchor -> the text of its section, up to the next heading of the same or a higher level.

    An explicit `<a id="...">` anchor takes the level of the heading that follows it, or, when
    a paragraph follows, runs to the next heading.
    """
    lines = text.splitlines()
    headings = []  # (line index, level, anchor)
    pending = None
    for index, line in enumerate(lines):
        explicit = re.match(r'<a id="(?P<id>[^"]+)"></a>', line.strip())
        if explicit:
            pending = (index, explicit["id"])
            continue
        heading = re.match(r"(?P<hashes>#{1,6}) (?P<title>.+)", line)
        if heading:
            level = len(heading["hashes"])
            headings.append((index, level, slug(heading["title"])))
            if pending is not None and all(not s.strip() for s in lines[pending[0] + 1 : index]):
                headings.append((index, level, pending[1]))
                pending = None
        elif pending is not None and line.strip():
            headings.append((pending[0], 7, pending[1]))
            pending = None
    headings.sort()
    sections = {}
    for position, (start, level, anchor) in enumerate(headings):
        end = len(lines)
        for later_start, later_level, _ in headings[position + 1 :]:
            if later_level <= level and later_start > start:
                end = later_start
                break
        sections[anchor] = "\n".join(lines[start:end])
    return sections


def appears(number, text):
    return re.search(rf"(?<![\w.]){re.escape(number)}(?![\d]|\.\d)", text) is not None


def readme_result_rows(readme):
    """The rows of README's "Current results" table, as lists of cells."""
    section = readme.split("## Current results", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    return header, [[c.strip() for c in row.strip("|").split("|")] for row in rows[2:]]


def disagreements(readme, results):
    """Every README figure or commit missing from the results section it links to."""
    sections = results_sections(results)
    problems = []
    header, rows = readme_result_rows(readme)
    result_column, measured_column = header.index("result"), header.index("measured")
    table_lines = set()
    for row in rows:
        line = "| " + " | ".join(row) + " |"
        table_lines.add(line)
        links = RESULTS_LINK.findall(line)
        if len(links) != 1:
            problems.append(f"README results row links {len(links)} result sections: {line}")
            continue
        section = sections.get(links[0])
        if section is None:
            problems.append(f"README links docs/results.md#{links[0]}, which does not exist")
            continue
        for number in NUMBER.findall(row[result_column]):
            if not appears(number, section):
                problems.append(f"{number} ({row[0]}) is not in results.md#{links[0]}")
        for commit in COMMIT.findall(row[measured_column]):
            if commit not in section:
                problems.append(f"commit {commit} ({row[0]}) is not in results.md#{links[0]}")
        if not COMMIT.search(row[measured_column]):
            problems.append(f"README results row names no commit: {row[0]}")
    for line in readme.splitlines():
        if "| " + " | ".join(c.strip() for c in line.strip("|").split("|")) + " |" in table_lines:
            continue
        for anchor in RESULTS_LINK.findall(line):
            section = sections.get(anchor)
            if section is None:
                problems.append(f"README links docs/results.md#{anchor}, which does not exist")
                continue
            for number in FIGURE.findall(line):
                if not appears(number, section):
                    problems.append(f"{number} in README line is not in results.md#{anchor}")
    return problems


def test_readme_results_agree_with_the_results_page():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    results = (REPO / "docs" / "results.md").read_text(encoding="utf-8")
    assert disagreements(readme, results) == []


RESULTS_PAGE = """# Results

## Multi30k

BLEU **41.47**, 2 h 5 min; commit 6536cfc.

<a id="bf16"></a>

**bf16.** 1.32x at batch 32, commit 390a3d8.

## Decoding

### Quickstart model

0.60-0.64x, commit 6536cfc.
"""
README_PAGE = """# x

A claim: 0.60-0.64x ([results](docs/results.md#quickstart-model)).

## Current results

| what | result | measured | details |
|---|---|---|---|
| Multi30k | BLEU 41.47 in about 2 h 5 min | 2026-12-06, 6536cfc | [m](docs/results.md#multi30k) |
| bf16 | 1.32x at batch 32 | 390a3d8 | [b](docs/results.md#bf16) |

## Documentation
"""


def test_agreeing_pages_pass_and_each_kind_of_disagreement_is_named():
    assert disagreements(README_PAGE, RESULTS_PAGE) == []
    stale_figure = README_PAGE.replace("BLEU 41.47", "BLEU 41.57")
    assert disagreements(stale_figure, RESULTS_PAGE) == [
        "41.57 (Multi30k) is not in results.md#multi30k"
    ]
    stale_commit = README_PAGE.replace("390a3d8 |", "076b28a |")
    assert disagreements(stale_commit, RESULTS_PAGE) == [
        "commit 076b28a (bf16) is not in results.md#bf16"
    ]
    stale_claim = README_PAGE.replace("A claim: 0.60-0.64x", "A claim: 0.43x")
    assert disagreements(stale_claim, RESULTS_PAGE) == [
        "0.43 in README line is not in results.md#quickstart-model"
    ]
    missing = README_PAGE.replace("#bf16)", "#decoding-speed)")
    assert disagreements(missing, RESULTS_PAGE) == [
        "README links docs/results.md#decoding-speed, which does not exist"
    ]


def test_a_figure_in_another_section_does_not_count():
    # 41.47 is on the page, but not in the bf16 paragraph the row links to.
    moved = README_PAGE.replace("| 1.32x at batch 32 |", "| BLEU 41.47 at batch 32 |")
    assert disagreements(moved, RESULTS_PAGE) == ["41.47 (bf16) is not in results.md#bf16"]


@pytest.mark.parametrize("page", sorted(LINE_LIMITS))
def test_pages_stay_within_their_line_limits(page):
    lines = (REPO / page).read_text(encoding="utf-8").count("\n")
    assert lines <= LINE_LIMITS[page], f"{page}: {lines} lines, at most {LINE_LIMITS[page]}"
