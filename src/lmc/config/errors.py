"""The one exception type users see, and the one warning category."""


class LmcError(ValueError):
    """A problem with the user's input or files (a ``ValueError``).

    The message says what was wrong and what to do. The command-line tool prints it as one
    line, without a traceback, and exits with status 2.
    """


class LmcWarning(UserWarning):
    """A result was computed but part of it is undefined or needs the user's attention.

    Issued with :func:`warnings.warn` (e.g. by :func:`lmc.metrics.evaluate_path` when the
    calibration's inverse temperature sits on a bound of its search, leaving calibrated losses
    NaN). The message says which numbers are affected and what to do; filter it with
    ``warnings.filterwarnings("ignore", category=LmcWarning)``.
    """
