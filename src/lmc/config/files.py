"""Opening input files safely: only regular files are read.

A FIFO (named pipe), a device or a socket given where lmc expects a file would make a plain
``open`` block forever (a FIFO with no writer) or read without end (``/dev/zero``). Every
reader of a file lmc did not just write itself goes through :func:`open_regular` (or its
helpers), which refuses anything but a regular file at once, with a one-line
:class:`~lmc.config.LmcError` naming the path.

How: ``os.stat`` first (it never opens the file, so it cannot block), then ``os.open`` with
``O_NONBLOCK`` and ``fstat`` on the descriptor, so a file swapped for a FIFO between the two
calls is still refused rather than waited on. Symbolic links are followed: a link to a
regular file is fine.
"""

from __future__ import annotations

import io
import os
import stat
from typing import IO

from .errors import LmcError

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _refuse(path: str | os.PathLike, what: str, mode: int) -> LmcError:
    return LmcError(f"{what} {path} is {_kind(mode)}, not a regular file; give a file")


def check_regular_file(path: str | os.PathLike, what: str = "file") -> os.stat_result:
    """``os.stat(path)`` if ``path`` is a regular file (or a link to one); otherwise an
    ``LmcError`` naming ``what`` and the path: missing, a folder, a FIFO, a device, a socket,
    or unreadable metadata. Never opens the file."""
    try:
        st = os.stat(path)
    except FileNotFoundError as exc:
        raise LmcError(f"cannot read {what} {path}: no such file") from exc
    except OSError as exc:
        raise LmcError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, what, st.st_mode)
    return st


def open_regular(path: str | os.PathLike, what: str = "file", *, encoding: str | None = None) -> IO:
    """Open ``path`` for reading if it is a regular file: binary, or text when ``encoding``
    is given. Anything else is refused at once (see the module docstring)."""
    check_regular_file(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise LmcError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # swapped between the stat and the open
            raise _refuse(path, what, mode)
        os.set_blocking(fd, True)
        handle: IO = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    if encoding is not None:
        return io.TextIOWrapper(handle, encoding=encoding)
    return handle


def read_regular_bytes(path: str | os.PathLike, what: str = "file") -> bytes:
    """The bytes of the regular file ``path`` (``LmcError`` naming it otherwise)."""
    with open_regular(path, what) as handle:
        try:
            return handle.read()
        except OSError as exc:
            raise LmcError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc


def read_regular_text(path: str | os.PathLike, what: str = "file", encoding: str = "utf-8") -> str:
    """The text of the regular file ``path``; bytes that are not ``encoding`` are an
    ``LmcError`` naming it."""
    data = read_regular_bytes(path, what)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise LmcError(f"{what} {path} is not {encoding} text ({exc.reason})") from exc


__all__ = ["check_regular_file", "open_regular", "read_regular_bytes", "read_regular_text"]
