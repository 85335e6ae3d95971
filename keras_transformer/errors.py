"""The one exception type for bad input that a user can fix.

Every check of user input (a config, a file, a text batch) raises `UserInputError` with a
message that says what is wrong, where, and how to fix it. The CLI prints that message alone,
without a traceback, and exits with status 2.
"""


class UserInputError(ValueError):
    """Bad input that the user can fix; the message says what, where and how."""
