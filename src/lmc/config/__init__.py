"""Shared foundations: errors and warnings, input checks (:mod:`lmc.config.validate`),
devices, seeds, canonical configs, progress, environment."""

from .canonical import canonical_json, config_hash
from .device import resolve_device
from .environment import environment_info
from .errors import LmcError, LmcWarning
from .files import check_regular_file, open_regular, read_regular_bytes, read_regular_text
from .progress import progress
from .validate import (
    check_choice,
    check_finite,
    check_flag,
    check_int,
    check_labels,
    check_lambda,
    check_number,
    warn_undefined,
)

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
    "open_regular",
    "progress",
    "read_regular_bytes",
    "read_regular_text",
    "resolve_device",
    "warn_undefined",
]
