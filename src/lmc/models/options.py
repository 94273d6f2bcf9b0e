"""What a model option is: :class:`ModelOption`, its default, meaning, type, choices and flag.

A model's module declares its options with these records (``register_model(options=...)``,
:mod:`lmc.models.registry`); ``lmc train`` generates its model flags and their help from them.
This module imports nothing heavy (no torch), so the declarations can be read cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_OPTION_TYPES = (int, float, str, bool)


@dataclass(frozen=True)
class ModelOption:
    """One option a model declares: its ``default`` and what it means (``help``, a phrase for
    ``--help``, e.g. ``"transformer blocks"``).

    ``type``: ``int``, ``float``, ``str`` or ``bool`` (default: the default's type; give it
    where the default is ``None`` or a word standing for a computed value, as ViT's
    ``patch = "auto"``); ``choices``: the allowed values, checked in every config;
    ``default_text``: how ``--help`` states the default when the value alone does not say it
    (``"--heads"``, ``"2 below 16 pixels, else 4"``); ``flag``: the ``lmc train`` flag,
    default ``--<name>`` with ``_`` written ``-`` (a ``bool`` option gets ``--<name>`` /
    ``--no-<name>``, or, with ``flag="--no-<name>"``, only the switch that sets it false);
    ``flag=""``: no flag (set in studies and configs only).
    """

    default: Any
    help: str = ""
    type: type | None = None
    choices: tuple[Any, ...] | None = None
    default_text: str | None = None
    flag: str | None = None

    def __post_init__(self) -> None:
        if self.type is None:
            inferred = type(self.default) if self.default is not None else str
            object.__setattr__(self, "type", inferred if inferred in _OPTION_TYPES else str)
        if self.type not in _OPTION_TYPES:
            raise ValueError(f"an option's type is one of int, float, str, bool: {self.type}")
        if self.choices is not None:
            object.__setattr__(self, "choices", tuple(self.choices))

    def flag_for(self, name: str) -> str:
        """The ``lmc train`` flag of option ``name`` (``""``: none)."""
        return f"--{name.replace('_', '-')}" if self.flag is None else self.flag

    @property
    def shown_default(self) -> str:
        """The default as ``--help`` states it."""
        if self.default_text is not None:
            return self.default_text
        if isinstance(self.default, bool):
            return "on" if self.default else "off"
        return (
            "none"
            if self.default is None
            else f"{self.default:g}"
            if isinstance(self.default, float)
            else str(self.default)
        )


__all__ = ["ModelOption"]
