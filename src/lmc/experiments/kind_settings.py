"""Checked study tables for the experiment kinds (:mod:`lmc.experiments.kinds`).

Every kind checks its study file as strictly as a width study: an unknown key, a missing
required key or a wrong type is an ``LmcError`` naming the key and the file. The tables a kind
shares with a width study (``[data]``, ``[model]``, ``[train]``) are checked here by the width
study's own rules (:mod:`lmc.experiments.study`), so they mean the same in every kind; only
what the width study takes from ``[sweep]`` (the width, the weight decay, the seeds) comes from
the kind's own table.
"""

from __future__ import annotations

import copy
from typing import Any

from lmc.config import LmcError
from lmc.data import DATASETS
from lmc.train import TrainSettings

#: A schema: key -> (allowed types, default); a default of ``...`` means required.
Schema = dict[str, tuple[tuple[type, ...], Any]]


def where(source: str | None) -> str:
    """`` in <source>`` for error messages (nothing without a source)."""
    return f" in {source}" if source else ""


def typed(key: str, value: Any, types: tuple[type, ...], source: str | None) -> Any:
    """``value`` if it is one of ``types`` (a bool only where ``bool`` is listed), else an
    ``LmcError`` naming ``key``."""
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        names = " or ".join(t.__name__ for t in types)
        raise LmcError(f"key {key!r}{where(source)} must be {names}, got {value!r}")
    return value


def table(given: Any, schema: Schema, prefix: str, source: str | None) -> dict[str, Any]:
    """The table ``given`` (``[prefix]``) checked against ``schema``, defaults filled in (a
    default of ``None`` stays ``None``: unset)."""
    if not isinstance(given, dict):
        raise LmcError(f"{prefix!r}{where(source)} must be a table ([{prefix}])")
    for key in given:
        if key not in schema:
            raise LmcError(
                f"unknown key '{prefix}.{key}'{where(source)}; known: {', '.join(schema)}"
            )
    out = {}
    for key, (types, default) in schema.items():
        if key not in given and default is ...:
            raise LmcError(f"missing key '{prefix}.{key}'{where(source)}")
        value = given.get(key, copy.deepcopy(default))
        out[key] = value if value is None else typed(f"{prefix}.{key}", value, types, source)
    return out


def header(
    raw: dict[str, Any], kind: str, top_level: tuple[str, ...], source: str | None
) -> tuple[str, str]:
    """``(name, description)`` of a study of ``kind`` whose top-level keys must be among
    ``top_level``; the name must be a plain folder name, as a width study's."""
    from .study import check_name

    for key in raw:
        if key not in top_level:
            raise LmcError(
                f"unknown key {key!r}{where(source)} for experiment {kind!r}; "
                f"top-level keys are {', '.join(top_level)}"
            )
    name = check_name(typed("name", raw.get("name", kind), (str,), source), source)
    description = typed("description", raw.get("description", ""), (str,), source)
    return name, description


def resolve_data(given: Any, source: str | None) -> dict[str, Any]:
    """The ``[data]`` table (``dataset``, ``options``, ``split``), checked as a width study
    checks it."""
    from .study import SCHEMA

    data = table(given, SCHEMA["data"], "data", source)
    if data["dataset"] not in DATASETS:
        raise LmcError(
            f"unknown dataset {data['dataset']!r}{where(source)}: "
            f"choose one of {', '.join(DATASETS)}"
        )
    if data["split"] not in ("train", "test"):
        raise LmcError(f"'data.split'{where(source)} must be train or test")
    return data


def resolve_model(given: Any, data: dict[str, Any], width_in: str, source: str | None) -> dict:
    """The ``[model]`` table, checked as a width study checks it; the width is set in the
    kind's table ``width_in`` (e.g. ``[onset]``), never as ``model.width``."""
    from .study import _resolve_model

    if not isinstance(given, dict):
        raise LmcError(f"'model'{where(source)} must be a table ([model])")
    if "width" in given:  # the width study's message would point to [sweep]
        raise LmcError(f"key 'model.width'{where(source)} is set in {width_in} (its key 'width')")
    return _resolve_model(copy.deepcopy(given), source, data)


def resolve_train(given: Any, set_in: str, source: str | None) -> dict[str, Any]:
    """The ``[train]`` table (:class:`lmc.train.TrainSettings` keys except the seeds and the
    weight decay, which are set in the table ``set_in``, e.g. ``[sweep]``), checked as a
    width study checks it."""
    from .study import _TRAIN_KEYS

    if not isinstance(given, dict):
        raise LmcError(f"'train'{where(source)} must be a table ([train])")
    unknown = set(given) - _TRAIN_KEYS
    if unknown:
        raise LmcError(
            f"unknown key 'train.{sorted(unknown)[0]}'{where(source)}; known: "
            f"{', '.join(sorted(_TRAIN_KEYS))} (weight decays and seeds are set in {set_in})"
        )
    try:
        TrainSettings.from_dict(given)
    except LmcError as exc:
        raise LmcError(f"[train]{where(source)}: {exc}") from None
    return copy.deepcopy(given)
