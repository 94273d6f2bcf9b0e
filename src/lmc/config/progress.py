"""Progress bars that can be switched off.

:func:`progress` wraps an iterable in a tqdm bar on stderr (or returns it as it is when
``quiet``). :func:`progress_bar` is a bar advanced by hand, and :func:`complete` ends it full
when its loop stops early on purpose (an iteration that converged before ``max_iter``), so it
does not end at, say, 3/100, which reads as an interrupted run (and shows red in a notebook).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")


def progress(iterable: Iterable[T], *, quiet: bool = False, **kwargs: Any) -> Iterable[T]:
    """Wrap ``iterable`` in a tqdm bar on stderr unless ``quiet``."""
    if quiet:
        return iterable
    kwargs.setdefault("file", sys.stderr)
    kwargs.setdefault("leave", False)
    kwargs.setdefault("dynamic_ncols", True)
    return tqdm(iterable, **kwargs)


def progress_bar(total: int | None, *, quiet: bool = False, **kwargs: Any) -> tqdm:
    """A tqdm bar of ``total`` steps on stderr, advanced by hand (``bar.update(1)``), for a
    loop that may stop early: end it with :func:`complete` when it is done, and close it
    (``bar.close()``) in a ``finally`` for the error case. With ``quiet`` it is a disabled bar
    (every call does nothing)."""
    kwargs.setdefault("file", sys.stderr)
    kwargs.setdefault("leave", False)
    kwargs.setdefault("dynamic_ncols", True)
    return tqdm(total=total, disable=quiet, **kwargs)


def complete(bar: tqdm, postfix: str | None = None) -> None:
    """End ``bar`` (from :func:`progress_bar`) full and close it: its count is set to its
    total (the work is done, though the loop left early, e.g. an iteration that converged
    before ``max_iter``) and ``postfix`` (e.g. ``"converged after 3 passes"``) is shown. A
    quiet or closed bar is left alone; a bar without a total is only closed.

    (A bar that wraps an iterable, :func:`progress`, closes itself when its loop is left, so
    it cannot be completed afterwards: use :func:`progress_bar` where a loop can stop early.)
    """
    if bar.disable:
        return
    if postfix is not None:
        bar.set_postfix_str(postfix, refresh=False)
    if bar.total is not None and bar.n < bar.total:
        bar.update(bar.total - bar.n)
    bar.refresh()  # draw the full bar now (update draws at most every mininterval)
    bar.close()
