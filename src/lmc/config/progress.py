"""Progress bars that can be switched off."""

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
