"""Shared foundations: errors and warnings, devices, seeds, canonical configs, progress,
environment."""

from .canonical import canonical_json, config_hash
from .device import resolve_device
from .environment import environment_info
from .errors import LmcError, LmcWarning
from .progress import progress

__all__ = [
    "LmcError",
    "LmcWarning",
    "canonical_json",
    "config_hash",
    "environment_info",
    "progress",
    "resolve_device",
]
