"""Shared foundations: errors and warnings, input checks (:mod:`lmc.config.validate`),
devices, seeds, canonical configs, progress, environment.

Importing this package is light (no torch): each name is loaded from its module the first time
it is asked for (:pep:`562`), so ``from lmc.config import LmcError`` costs only
:mod:`lmc.config.errors` and a command's ``--help`` never pays for torch. ``progress`` is
bound at once, since :mod:`lmc.config.progress` shares its name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import LmcError, LmcWarning
from .progress import progress

if TYPE_CHECKING:
    from .canonical import canonical_json, config_hash
    from .device import resolve_device
    from .environment import environment_info
    from .files import check_regular_file, open_regular, read_regular_bytes, read_regular_text
    from .validate import (
        check_choice,
        check_finite,
        check_flag,
        check_int,
        check_labels,
        check_lambda,
        check_number,
        lookup_name,
        warn_undefined,
    )

#: every name loaded on first use -> the module under lmc.config that defines it
_LAZY = {
    "canonical_json": "canonical",
    "config_hash": "canonical",
    "resolve_device": "device",
    "environment_info": "environment",
    "check_regular_file": "files",
    "open_regular": "files",
    "read_regular_bytes": "files",
    "read_regular_text": "files",
    "check_choice": "validate",
    "check_finite": "validate",
    "check_flag": "validate",
    "check_int": "validate",
    "check_labels": "validate",
    "check_lambda": "validate",
    "check_number": "validate",
    "lookup_name": "validate",
    "warn_undefined": "validate",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "LmcError",
    "LmcWarning",
    "canonical_json",
    "check_choice",
    "check_finite",
    "check_flag",
    "check_int",
    "check_labels",
    "check_lambda",
    "check_number",
    "check_regular_file",
    "config_hash",
    "environment_info",
    "lookup_name",
    "open_regular",
    "progress",
    "read_regular_bytes",
    "read_regular_text",
    "resolve_device",
    "warn_undefined",
]
