"""The text files of the commands: input read in chunks of lines (a bad byte reported with its
line), output written beside its target and renamed only when the run succeeds.

Example:
    >>> with open_input("test.en") as (source, name), open_output("test.de") as out:
    ...     for chunk in line_chunks(source, 1024, name):  # doctest: +SKIP
    ...         out.writelines(line + "\n" for line in chunk)
"""

import contextlib
import itertools
import sys

from keras_transformer.errors import UserInputError, not_utf8_message
from keras_transformer.files import atomic_write


@contextlib.contextmanager
def open_input(path):
    """`(binary file, name for messages)` of `path`, or of stdin when `path` is None: lines are
    decoded one by one in `line_chunks`, so that a bad byte is reported with its line."""
    if path is None:
        yield sys.stdin.buffer, "stdin"
        return
    try:
        file = open(path, "rb")
    except OSError as error:
        raise UserInputError(f"cannot open {path!r}: {error.strerror}") from None
    with file:
        yield file, repr(path)


@contextlib.contextmanager
def open_output(path):
    """A UTF-8 text file for `path`, or stdout when `path` is None. A file is written beside
    `path` and renamed onto it only when the whole run succeeds: an earlier file of that name
    survives bad input or an interrupted run."""
    if path is None:
        yield sys.stdout
        return
    with contextlib.ExitStack() as stack:
        try:  # only the opening: an error of the run itself passes through unrenamed
            file = stack.enter_context(atomic_write(path, encoding="utf-8"))
        except OSError as error:
            raise UserInputError(f"cannot write {path!r}: {error.strerror}") from None
        yield file


def line_chunks(source, size, name="the input"):
    """Lists of at most `size` lines (newlines stripped) of an open binary file, in order: a
    long input is decoded chunk by chunk and written as it goes, never held whole.

    Raises:
        UserInputError: at a line that is not UTF-8, naming `name` and the line number.
    """

    def lines():
        for number, raw in enumerate(source, 1):
            try:
                yield raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as error:
                raise UserInputError(not_utf8_message(name, number, raw, error)) from None

    stream = lines()
    while chunk := list(itertools.islice(stream, size)):
        yield chunk


def count_lines(path):
    """The number of lines of `path` (a last line without a newline counts)."""
    with open_input(path) as (file, _):
        count, last = 0, b"\n"
        for block in iter(lambda: file.read(1 << 20), b""):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")
