"""The one exception type users see."""


class LmcError(Exception):
    """A problem with the user's input or files.

    The message says what was wrong and what to do. The command-line tool prints it as one
    line, without a traceback, and exits with status 2.
    """
