"""Command-line flags of the alignment methods, made from their records (:mod:`lmc.perm.methods`).

Every setting of every registered method is one flag, ``--<method>-<setting>`` (e.g.
``--weight-max-iter``, ``--ste-steps``), in an argument group per method; a flag left out means
the method's default. A flag of another method than the one asked for is an error, not
silently ignored. ``lmc align`` also keeps its older short flags (``--max-iter``, ``--init``,
...; :data:`lmc.cli.align.SHORT_FLAGS`), read through :func:`method_settings`' ``short``.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from lmc.config import LmcError
from lmc.perm.methods import AlignmentMethod, MethodSetting, all_methods, get_method


def _dest(method: AlignmentMethod, setting: MethodSetting) -> str:
    return f"method_setting__{method.name}__{setting.name}".replace("-", "_")


def _default_text(setting: MethodSetting) -> str:
    value = setting.default
    if value is None:
        return "none"
    return str(value).lower() if isinstance(value, bool) else str(value)


def add_method_options(parser: argparse.ArgumentParser, *, skip: Sequence[str] = ("none",)) -> None:
    """One flag per setting of every registered method but ``skip`` (see the module
    docstring). Values are read as text here and checked by :func:`method_settings`."""
    for method in all_methods():
        if method.name in skip or not method.settings:
            continue
        group = parser.add_argument_group(
            f"settings of method {method.name}", f"{method.description}."
        )
        for setting in method.settings:
            choices = f" ({', '.join(setting.choices)})" if setting.choices else ""
            group.add_argument(
                method.flag(setting),
                dest=_dest(method, setting),
                default=None,
                metavar=setting.type.__name__.upper() if not setting.choices else "NAME",
                help=f"{setting.help}{choices}; default {_default_text(setting)}".replace(
                    "%", "%%"
                ),
            )


def given_settings(
    args: argparse.Namespace, method: str, *, short: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The settings of ``method`` given on the command line (checked), without defaults.

    ``short``: ``{setting name: value}`` read from older flags for this method; the
    ``--<method>-<setting>`` flag wins over them. A flag of another method is an error."""
    given = dict(short or {})
    for other in all_methods():
        for setting in other.settings:
            raw = getattr(args, _dest(other, setting), None)
            if raw is None:
                continue
            flag = other.flag(setting)
            if other.name != method:
                raise LmcError(
                    f"{flag} is a setting of method {other.name!r}, but the method asked for is "
                    f"{method!r}: drop it or ask for {other.name}"
                )
            given[setting.name] = setting.parse(raw, flag)
    return given


def method_settings(
    args: argparse.Namespace, method: str, *, short: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Every setting of ``method``: the given ones (:func:`given_settings`) over its defaults."""
    return get_method(method).resolve(given_settings(args, method, short=short))


__all__ = ["add_method_options", "given_settings", "method_settings"]
