"""`translate --prefix-file F`: one target prefix per input line, an empty line for none.

The prefix file is read in chunks beside the input, as the input is. Its line count must
equal the input's: with an input file both are counted before the model loads; with stdin,
whose length is known only at its end, a mismatch stops the run where it shows (an `-o` file
is written only when the whole run succeeds, so an earlier one survives).
"""

import contextlib

from keras_transformer.cli._text_files import count_lines, line_chunks, open_input
from keras_transformer.errors import UserInputError


def _mismatch(path, prefix_count, input_name, input_count):
    return UserInputError(
        f"--prefix-file {path!r} has {prefix_count} lines but the input {input_name} has "
        f"{input_count}; give one prefix line per input line (an empty line for none)"
    )


def check_prefix_file(path, input_path):
    """The prefix file's line count; with an input file, an error unless it has as many."""
    count = count_lines(path)
    if input_path is not None:
        input_count = count_lines(input_path)
        if input_count != count:
            raise _mismatch(path, count, repr(input_path), input_count)
    return count


class PrefixChunks:
    """The prefixes of each input chunk, in step with `line_chunks` over the input."""

    def __init__(self, path, chunks, count):
        self.path, self.chunks, self.count = path, chunks, count

    def take(self, chunk, index, input_name):
        """The prefixes of `chunk`, the input's lines `index + 1 ...` (None without a file)."""
        if self.path is None:
            return None
        prefixes = next(self.chunks, [])
        if len(prefixes) != len(chunk):
            # A chunk shorter than the prefix chunk is the input's last one.
            longer = len(chunk) > len(prefixes)
            shown = f"more than {self.count}" if longer else index + len(chunk)
            raise _mismatch(self.path, self.count, input_name, shown)
        return prefixes

    def finish(self, lines_read, input_name):
        """At the end of the input: an error if prefix lines are left over."""
        if self.path is not None and lines_read != self.count:
            raise _mismatch(self.path, self.count, input_name, lines_read)


@contextlib.contextmanager
def prefix_chunks(path, chunk_size, count):
    """A `PrefixChunks` over `path` (chunks of `chunk_size` lines), or a no-op for None."""
    if path is None:
        yield PrefixChunks(None, iter(()), 0)
        return
    with open_input(path) as (file, name):
        yield PrefixChunks(path, line_chunks(file, chunk_size, name), count)
