"""Where lmc keeps what it measured or built for this user: one folder, ``$XDG_CACHE_HOME/lmc``
(``~/.cache/lmc`` when that is unset), holding downloaded datasets (:mod:`lmc.data.paths`), the
bfloat16 timings of precision ``auto`` (:mod:`lmc.config.precision`) and the stored help of the
verbs (:mod:`lmc.cli.help_cache`). Each place can be moved or turned off by its own variable.
Standard library only: importing this module never imports torch.
"""

from __future__ import annotations

import os
from pathlib import Path


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/lmc``, or ``~/.cache/lmc`` when that is unset or empty."""
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "lmc"


def cache_place(env: str, *parts: str) -> Path | None:
    """``$env`` when set (an empty value: ``None``, nothing is kept), else
    :func:`user_cache_dir` joined with ``parts``."""
    given = os.environ.get(env)
    if given is not None:
        return Path(given).expanduser() if given.strip() else None
    return user_cache_dir().joinpath(*parts)


__all__ = ["cache_place", "user_cache_dir"]
