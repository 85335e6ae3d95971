"""A griffe extension for the API pages: two docstring conventions of the code as Markdown.

- Doctest examples (`>>> ...` and the output below, under `Example:`): Google-style parsing
  keeps them as Markdown text, where `>>>` would read as a quotation and an output such as
  `[7, 8, 3]` as a link. Each run of doctest lines is put in a fenced `pycon` block.
- `Call args:` sections of the layers (the arguments of `call`, beside the constructor's
  `Args:`): kept as an admonition, whose `name: description` lines would run together into
  one paragraph. Each item becomes a list item.

Nothing else in a docstring changes.
"""

import re

import griffe

FENCE = "```"
CALL_ARGS = re.compile(r"^(?P<indent>\s*)Call args:\s*$")
ITEM = re.compile(r"^(?P<name>\w+): (?P<text>.*)$")


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


def list_call_args(text):
    """`text` with the `name: description` items of each `Call args:` section as a Markdown
    list (continuation lines, indented deeper, stay with their item)."""
    lines, result, section_indent, item_indent = text.split("\n"), [], None, None
    for line in lines:
        heading = CALL_ARGS.match(line)
        if heading:
            section_indent, item_indent = len(heading.group("indent")), None
            result.append(line)
            continue
        indent = len(line) - len(line.lstrip())
        if section_indent is not None and line.strip() and indent > section_indent:
            item_indent = indent if item_indent is None else item_indent
            item = ITEM.match(line.strip())
            if indent == item_indent and item:
                line = f"{' ' * indent}- `{item.group('name')}`: {item.group('text')}"
        elif line.strip():
            section_indent = None
        result.append(line)
    return "\n".join(result)


class DocstringMarkdown(griffe.Extension):
    """Rewrites every docstring as it is loaded (see the module docstring)."""

    def on_object(self, *, obj, loader, **kwargs):
        if obj.docstring is None:
            return
        value = obj.docstring.value
        if ">>>" in value:
            value = fence_doctests(value)
        if "Call args:" in value:
            value = list_call_args(value)
        obj.docstring.value = value
