"""The one exception type for bad input that a user can fix.

Every check of user input (a config, a file, a text batch) raises `UserInputError` with a
message that says what is wrong, where, and how to fix it. The CLI prints that message alone,
without a traceback, and exits with status 2.
"""


class UserInputError(ValueError):
    """Bad input that the user can fix; the message says what, where and how."""


class InputWarning(UserWarning):
    """Input used in a changed form (a too long line truncated); the message says which input
    and what was done. The CLI prints it as one line, without Python's source line."""


def not_utf8_message(where, line_number, line, error):
    """What a `UnicodeDecodeError` in `line` (bytes; line `line_number` of `where`) means and
    how to fix it: the one wording of the corpus readers and the CLI's text input."""
    return (
        f"{where} line {line_number} is not valid UTF-8 (byte 0x{line[error.start]:02x} at "
        f"byte offset {error.start}); re-encode the file as UTF-8 (for example "
        "`iconv -f latin1 -t utf-8`)"
    )


def report_interrupted(program):
    """What Ctrl-C leaves behind, in one line on stderr instead of a traceback; returns the exit
    status a shell reports for SIGINT (130). A training run keeps its newest complete
    checkpoint, and outputs are written beside their target and renamed only when complete."""
    import sys

    print(
        f"{program}: interrupted; outputs written so far and the newest complete checkpoint "
        "are kept: the same command resumes a training run from that checkpoint",
        file=sys.stderr,
    )
    return 130
