"""The documented examples run: every ```python block of README.md and docs/**/*.md.

The contract (docs/contributing.md, "Documented examples"):

- The runnable blocks of one page run in order, in one new Python process (forked from one
  that imported TensorFlow and Keras: tests/_preloaded_python.py), so that a later block may
  use the names of an earlier one. A ```bash block runs too when the line before it
  is `<!-- example: run -->` (same folder; `keras-transformer` is on PATH).
- The process runs in a temporary folder holding a copy of configs/ and a tiny trained run
  folder at runs/quickstart (the layout `train` leaves: config.json, vocab.model,
  checkpoints/, model.keras, averaged.keras), with KT_DATA_DIR set.
- `<!-- example: skip (REASON) -->` before a block leaves it out; the reason is required.
- `<!-- example: output -->` before a ```text block: what the page says the examples since
  the previous such block print. The printed text must be that (trailing spaces and blank
  lines at either end aside).

The run folder is the shortened quickstart's (`pipelines/quickstart.py` on a 1-layer d_model 32
model, 8 updates; tests/_quickstart_fixtures.py), made once per test run and shared with the
quickstart's own tests. Each page that reads runs/quickstart gets its own copy, so that a page
may change it freely; each page is its own unit of work for pytest-xdist (tests/conftest.py),
so that the pages spread over the workers.
"""

import dataclasses
import json
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from tests import _preloaded_python
from tests._training_fixtures import REPO, subprocess_env

PAGE_TIMEOUT_SECONDS = 420

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)[^`]*$")
MARKER = re.compile(r"^\s*<!--\s*example:(?P<body>.*?)-->\s*$")
SKIP = re.compile(r"^skip\s*\((?P<reason>.*)\)$")
PYTHON_LANGUAGES = ("python", "py")
SHELL_LANGUAGES = ("bash", "sh", "shell")


class ExampleMarkupError(ValueError):
    """A page's example markers break the contract (named page and line)."""


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str  # the page, relative to the repository
    line: int  # the line of the block's first code line, counted from 1
    language: str  # the fence's language, lower-case ("" when none)
    code: str
    action: str  # "python" or "bash" (runs), "output" (compared), "skip" or "show" (not run)
    reason: str = ""


def parse_blocks(text, page):
    """The fenced blocks of a Markdown page, with what the contract does with each."""
    blocks, marker, fence = [], None, None
    for number, line in enumerate(text.splitlines(), start=1):
        if fence is not None:
            indent, chars, start, language, body = fence
            if line.strip().startswith(chars) and set(line.strip()) == {chars[0]}:
                code = textwrap.dedent("\n".join(body)) + "\n"
                blocks.append(_block(page, start, language, code, marker))
                fence, marker = None, None
            else:
                body.append(line[len(indent) :] if line.startswith(indent) else line)
            continue
        found = MARKER.match(line)
        if found:
            if marker is not None:
                raise ExampleMarkupError(f"{page} line {marker[0]}: a marker with no code block")
            marker = (number, found.group("body").strip())
            continue
        opening = FENCE.match(line)
        if opening:
            fence = (
                opening.group("indent"),
                opening.group("fence"),
                number + 1,
                opening.group("info").lower(),
                [],
            )
        elif line.strip() and marker is not None:
            raise ExampleMarkupError(
                f"{page} line {marker[0]}: '<!-- example: {marker[1]} -->' must stand right "
                "before a code block (blank lines may come between)"
            )
    if fence is not None:
        raise ExampleMarkupError(f"{page} line {fence[2] - 1}: a code block that never closes")
    if marker is not None:
        raise ExampleMarkupError(f"{page} line {marker[0]}: a marker with no code block")
    _check_outputs(blocks, page)
    return blocks


def _check_outputs(blocks, page):
    """An output block must follow an example that runs, with no other output block between."""
    printing = False
    for block in blocks:
        if block.action == "output":
            if not printing:
                raise ExampleMarkupError(
                    f"{page} line {block.line - 1}: an output block with no example that runs "
                    "before it (since the previous output block)"
                )
            printing = False
        elif block.action in ("python", "bash"):
            printing = True


def _block(page, line, language, code, marker):
    runs = {**dict.fromkeys(PYTHON_LANGUAGES, "python"), **dict.fromkeys(SHELL_LANGUAGES, "bash")}
    if marker is None:
        action = "python" if language in PYTHON_LANGUAGES else "show"
        return Block(page, line, language, code, action)
    marker_line, body = marker
    if body == "output":
        if language not in ("text", ""):
            raise ExampleMarkupError(
                f"{page} line {marker_line}: '<!-- example: output -->' marks a text block "
                f"(what the examples print), not a {language} block"
            )
        return Block(page, line, language, code, "output")
    if body == "run":
        if language not in runs:
            raise ExampleMarkupError(
                f"{page} line {marker_line}: '<!-- example: run -->' runs python or bash "
                f"blocks, not a {language or 'plain'} block"
            )
        return Block(page, line, language, code, runs[language])
    skipped = SKIP.match(body)
    if skipped and skipped.group("reason").strip():
        return Block(page, line, language, code, "skip", skipped.group("reason").strip())
    if body.startswith("skip"):
        raise ExampleMarkupError(
            f"{page} line {marker_line}: a skipped example needs its reason: "
            "'<!-- example: skip (why it cannot run in a test) -->'"
        )
    raise ExampleMarkupError(
        f"{page} line {marker_line}: '<!-- example: {body} -->' is not a marker; write "
        "'<!-- example: run -->', '<!-- example: output -->' or "
        "'<!-- example: skip (why it cannot run in a test) -->'"
    )


# Runs the blocks named in a JSON file, in order, in this process; reports the failing one, or
# an output block that is not what the blocks before it printed.
DRIVER = r"""
import contextlib, json, subprocess, sys, traceback

class Tee:
    def __init__(self, *streams):
        self.streams = streams
    def write(self, text):
        for stream in self.streams:
            stream.write(text)
        return len(text)
    def flush(self):
        for stream in self.streams:
            stream.flush()

def lines(text):
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())

blocks = json.load(open(sys.argv[1], encoding="utf-8"))
namespace = {"__name__": "__main__"}
printed = []
for block in blocks:
    where = f"{block['page']} line {block['line']}"
    print(f"DOC-EXAMPLE-START {where}", file=sys.stderr, flush=True)
    if block["action"] == "output":
        got, printed = "".join(printed), []
        if lines(got) != lines(block["code"]):
            print(f"DOC-EXAMPLE-FAILED {where}: the examples before it printed\n{got}\n"
                  f"but the page shows\n{block['code']}", file=sys.stderr)
            sys.exit(1)
        continue
    if block["action"] == "bash":
        sys.stdout.flush()
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", block["code"]],
                                stdout=subprocess.PIPE, text=True)
        sys.stdout.write(result.stdout)
        printed.append(result.stdout)
        if result.returncode:
            print(f"DOC-EXAMPLE-FAILED {where}: exit status {result.returncode}", file=sys.stderr)
            sys.exit(1)
        continue
    # Padded so that a traceback's line numbers are the page's.
    source = "\n" * (block["line"] - 1) + block["code"]
    class Kept:
        def write(self, text):
            printed.append(text)
            return len(text)
        def flush(self):
            pass
    try:
        with contextlib.redirect_stdout(Tee(sys.stdout, Kept())):
            exec(compile(source, block["path"], "exec"), namespace)
    except SystemExit as stop:
        if stop.code not in (0, None):
            print(f"DOC-EXAMPLE-FAILED {where}: SystemExit({stop.code!r})", file=sys.stderr)
            sys.exit(1)
    except BaseException as error:
        traceback.print_exc()
        print(f"DOC-EXAMPLE-FAILED {where}: {type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(1)
"""


def run_blocks(blocks, workdir, env, timeout=PAGE_TIMEOUT_SECONDS):
    """Runs `blocks` (of one page) in a new interpreter in `workdir`; returns None when all
    pass, else a message naming the page, the block's line and the error."""
    workdir = pathlib.Path(workdir)
    listing = workdir / ".doc_examples.json"
    driver = workdir / ".doc_examples_driver.py"
    listing.write_text(
        json.dumps(
            [
                {**dataclasses.asdict(b), "path": str(REPO / b.page) if b.page else b.page}
                for b in blocks
            ]
        ),
        encoding="utf-8",
    )
    driver.write_text(DRIVER, encoding="utf-8")
    try:
        result = _preloaded_python.run(
            [sys.executable, str(driver), str(listing)],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as expired:
        stderr = expired.stderr.decode() if isinstance(expired.stderr, bytes) else expired.stderr
        started = re.findall(r"DOC-EXAMPLE-START (.*)", stderr or "")
        where = started[-1] if started else blocks[0].page
        return f"{where}: the example ran past {timeout} s\n{(stderr or '')[-3000:]}"
    if result.returncode == 0:
        return None
    failed = re.findall(r"DOC-EXAMPLE-FAILED (.*)", result.stderr)
    headline = failed[-1] if failed else f"{blocks[0].page}: exit status {result.returncode}"
    output = re.sub(r"DOC-EXAMPLE-START .*\n", "", result.stdout[-2000:] + result.stderr[-6000:])
    return f"the documented example at {headline}\n{output}"


def page_environment(shim_folder):
    """The environment of a page's process: TensorFlow's kernels as users have them, the
    package importable, and its `keras-transformer` command first on PATH (`cli_shim`)."""
    return subprocess_env(users_kernels=True, path_first=[str(cli_shim(shim_folder))])


def cli_shim(directory):
    """A `keras-transformer` command in `directory` that runs this interpreter's package, so
    that bash examples call the code under test however it was installed."""
    directory.mkdir(parents=True, exist_ok=True)
    shim = directory / "keras-transformer"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m keras_transformer "$@"\n')
    shim.chmod(0o755)
    return directory


def documented_pages():
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md"))]
    return [str(page.relative_to(REPO)) for page in pages if page.is_file()]


def page_workdir(parent, run):
    """A fresh folder with a copy of configs/ and, given one, of a run at runs/quickstart."""
    parent.mkdir(parents=True, exist_ok=True)
    if (REPO / "configs").is_dir():
        shutil.copytree(REPO / "configs", parent / "configs")
    if run is not None:
        shutil.copytree(run, parent / "runs" / "quickstart")
    return parent


@pytest.mark.parametrize("page", documented_pages())
def test_documented_examples_run(page, request, tmp_path, data_dir):
    blocks = parse_blocks((REPO / page).read_text(encoding="utf-8"), page)
    runnable = [block for block in blocks if block.action in ("python", "bash", "output")]
    if not runnable:
        return  # the page's markers were checked by parse_blocks; nothing to run
    run = None
    if any("runs/quickstart" in block.code for block in runnable):
        run = request.getfixturevalue("quickstart_run").run
    workdir = page_workdir(tmp_path / "work", run)
    env = page_environment(tmp_path / "bin")
    env["KT_DATA_DIR"] = str(data_dir)
    failure = run_blocks(runnable, workdir, env)
    assert failure is None, failure


# -- the harness itself ----------------------------------------------------------------------

PAGE = """# A page

<!-- example: skip (needs a server) -->

```python
raise RuntimeError("never run")
```

```python
value = 6 * 7
```

<!-- example: run -->
```bash
echo shown
```

```bash
echo not run
```

```json
{"a": 1}
```

    ```python
    assert value == 42
    ```
"""


def test_parse_blocks_applies_the_markers():
    blocks = parse_blocks(PAGE, "docs/page.md")
    assert [(b.line, b.language, b.action) for b in blocks] == [
        (6, "python", "skip"),
        (10, "python", "python"),
        (15, "bash", "bash"),
        (19, "bash", "show"),
        (23, "json", "show"),
        (27, "python", "python"),
    ]
    assert blocks[0].reason == "needs a server"
    assert blocks[5].code == "assert value == 42\n"  # the list item's indentation removed


@pytest.mark.parametrize(
    "markup, complaint",
    [
        ("<!-- example: skip -->\n```python\npass\n```\n", "line 1: a skipped example needs"),
        ("<!-- example: skip () -->\n```python\npass\n```\n", "needs its reason"),
        ("<!-- example: runs -->\n```python\npass\n```\n", "is not a marker"),
        ("<!-- example: run -->\n```json\n{}\n```\n", "not a json block"),
        ("<!-- example: run -->\ntext\n```bash\nls\n```\n", "must stand right before"),
        ("```python\npass\n", "never closes"),
        ("text\n<!-- example: run -->\n", "a marker with no code block"),
        ("<!-- example: output -->\n```python\npass\n```\n", "not a python block"),
        ("<!-- example: output -->\n```text\n1\n```\n", "line 2: an output block with no"),
    ],
)
def test_parse_blocks_rejects_broken_markers(markup, complaint):
    with pytest.raises(ExampleMarkupError, match=re.escape(complaint)):
        parse_blocks(markup, "docs/page.md")


def test_a_broken_example_names_its_page_line_and_error(tmp_path):
    blocks = [
        b
        for b in parse_blocks(
            "```python\nname = 'kept'\n```\n\n```python\nassert name == 'kept'\n1 / 0\n```\n",
            "docs/broken.md",
        )
        if b.action == "python"
    ]
    failure = run_blocks(blocks, tmp_path, page_environment(tmp_path / "bin"), timeout=60)
    assert failure is not None
    assert "docs/broken.md line 6: ZeroDivisionError" in failure
    assert 'broken.md", line 7' in failure  # the traceback counts the page's lines


def test_a_failing_bash_example_fails_and_a_passing_page_passes(tmp_path):
    page = (
        "<!-- example: run -->\n```bash\ntouch made.txt\n```\n\n```python\nopen('made.txt')\n```\n"
    )
    blocks = [b for b in parse_blocks(page, "docs/ok.md") if b.action != "show"]
    assert run_blocks(blocks, tmp_path, page_environment(tmp_path / "bin"), timeout=60) is None
    bad = parse_blocks("<!-- example: run -->\n```bash\nfalse\n```\n", "docs/bad.md")
    failure = run_blocks(bad, tmp_path, page_environment(tmp_path / "bin"), timeout=60)
    assert "docs/bad.md line 3: exit status 1" in failure


def test_printed_output_is_compared_with_the_page(tmp_path):
    page = (
        "```python\nprint(6 * 7)  \nprint('two')\n```\n\n<!-- example: output -->\n"
        "```text\n42\ntwo\n```\n\n<!-- example: run -->\n```bash\necho three\n```\n\n"
        "<!-- example: output -->\n```text\n{shown}\n```\n"
    )
    shown = parse_blocks(page.format(shown="three"), "docs/shown.md")
    assert [b.action for b in shown] == ["python", "output", "bash", "output"]
    assert run_blocks(shown, tmp_path, page_environment(tmp_path / "bin"), timeout=60) is None
    wrong = parse_blocks(page.format(shown="four"), "docs/shown.md")
    failure = run_blocks(wrong, tmp_path, page_environment(tmp_path / "bin"), timeout=60)
    assert "at docs/shown.md line 19: the examples before it printed" in failure
    assert "printed\nthree\n\nbut the page shows\nfour" in failure
