"""A griffe extension for the API pages: doctest examples in docstrings become code blocks.

The docstrings show examples as doctest lines (`>>> ...` and the output below) under an
`Example:` heading, which Google-style parsing keeps as Markdown text, where `>>>` would read
as a quotation and an output such as `[7, 8, 3]` as a link. Each run of doctest lines is put
in a fenced `pycon` block instead; nothing else in a docstring changes.
"""

import griffe

FENCE = "```"


def fence_doctests(text):
    """`text` with each run of doctest lines (from `>>>` to a blank or less indented line)
    inside a fenced `pycon` block at that run's indentation."""
    lines, fenced, index = text.split("\n"), [], 0
    while index < len(lines):
        line = lines[index]
        if not line.lstrip().startswith(">>>"):
            fenced.append(line)
            index += 1
            continue
        indent = line[: len(line) - len(line.lstrip())]
        run = []
        while index < len(lines) and lines[index].strip() and lines[index].startswith(indent):
            run.append(lines[index])
            index += 1
        fenced += [indent + FENCE + "pycon", *run, indent + FENCE]
    return "\n".join(fenced)


class DoctestBlocks(griffe.Extension):
    """Fences the doctest examples of every docstring as it is loaded."""

    def on_object(self, *, obj, loader, **kwargs):
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
