"""Shared foundations: errors, devices, seeds, canonical configs, progress, environment."""

from .canonical import canonical_json, config_hash
from .device import resolve_device
from .environment import environment_info
from .errors import LmcError
from .progress import progress

__all__ = [
    "LmcError",
    "canonical_json",
    "config_hash",
    "environment_info",
    "progress",
    "resolve_device",
]
