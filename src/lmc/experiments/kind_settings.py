"""Checked study tables shared by the experiment kinds (:mod:`lmc.experiments.kinds`).

Every kind checks its study file strictly: an unknown key, a missing required key or a wrong
type is an ``LmcError`` naming the key and the file. The tables several kinds share
(``[data]``, ``[model]``, ``[train]``) and the study's ``name`` are checked here, by one set of
rules, so they mean the same in every kind (the width study's :mod:`lmc.experiments.
width_settings` included); what a width study takes from ``[sweep]`` (the width, the weight
decay, the seeds) another kind sets in its own table.
"""

from __future__ import annotations

import copy
import re
from dataclasses import fields
from typing import Any

from lmc.config import LmcError
from lmc.data import ALL_DATASETS, input_shape
from lmc.data.loaders import dataset_task
from lmc.models import MODELS, check_options, get_model
from lmc.train import TrainSettings

#: A schema: key -> (allowed types, default); a default of ``...`` means required.
Schema = dict[str, tuple[tuple[type, ...], Any]]
#: The ``[data]`` table of every kind that trains.
DATA_SCHEMA: Schema = {
    "dataset": ((str,), ...),
    "options": ((dict,), {}),
    "split": ((str,), "test"),
}
#: The keys of ``[train]``: :class:`lmc.train.TrainSettings` but the seeds and the weight decay,
#: which a study sets per run in its own table.
TRAIN_KEYS = {f.name for f in fields(TrainSettings)} - {"init_seed", "data_seed", "weight_decay"}
#: Most training runs one study may ask for (a guard against a typo such as pairs = 10**8).
MAX_TRAINING_RUNS = 20_000


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


def check_name(name: str, source: str | None = None) -> str:
    """``name`` if it is a plain study name (it names the output folder), else an
    ``LmcError``."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", name):
        raise LmcError(
            f"'name'{where(source)} must be a plain name (letters, digits, '.', '_', '-'; "
            f"no '/' or '..'; it names the output folder), got {name!r}"
        )
    return name


def header(
    raw: dict[str, Any], kind: str, top_level: tuple[str, ...], source: str | None
) -> tuple[str, str]:
    """``(name, description)`` of a study of ``kind`` whose top-level keys must be among
    ``top_level``; the name must be a plain folder name (:func:`check_name`)."""
    for key in raw:
        if key not in top_level:
            raise LmcError(
                f"unknown key {key!r}{where(source)} for experiment {kind!r}; "
                f"top-level keys are {', '.join(top_level)}"
            )
    name = check_name(typed("name", raw.get("name", kind), (str,), source), source)
    description = typed("description", raw.get("description", ""), (str,), source)
    return name, description


def check_data(data: dict[str, Any], source: str | None) -> dict[str, Any]:
    """The values of a ``[data]`` table whose keys are checked: a known dataset (image, vector
    or text: ``ALL_DATASETS``), a split of ``train`` or ``test``."""
    if data["dataset"] not in ALL_DATASETS:
        raise LmcError(
            f"unknown dataset {data['dataset']!r}{where(source)}: "
            f"choose one of {', '.join(ALL_DATASETS)}"
        )
    if data["split"] not in ("train", "test"):
        raise LmcError(f"'data.split'{where(source)} must be train or test")
    return data


def resolve_data(given: Any, source: str | None) -> dict[str, Any]:
    """The ``[data]`` table (``dataset``, ``options``, ``split``), checked."""
    return check_data(table(given, DATA_SCHEMA, "data", source), source)


def resolve_model(
    given: Any,
    data: dict[str, Any] | None,
    width_in: str,
    source: str | None,
    width_key: str = "width",
) -> dict[str, Any]:
    """The ``[model]`` table: ``name`` and the model's options (defaults filled in), checked
    against the model registry and the dataset's example shape (``data``: the ``[data]``
    table, or ``None`` when it is not known yet). The width and the input sizes are set by
    lmc: the width in the kind's table ``width_in`` (e.g. ``[onset]``) as its key
    ``width_key``, never as ``model.width``."""
    if not isinstance(given, dict):
        raise LmcError(f"'model'{where(source)} must be a table ([model])")
    name = given.get("name")
    if name is None:
        raise LmcError(f"missing key 'model.name'{where(source)}; one of {', '.join(MODELS)}")
    if name not in MODELS:
        raise LmcError(f"unknown model {name!r}{where(source)}: choose one of {', '.join(MODELS)}")
    entry = get_model(name)
    options = {k: copy.deepcopy(v) for k, v in given.items() if k != "name"}
    if "width" in options:
        raise LmcError(
            f"key 'model.width'{where(source)} is set in {width_in} (its key '{width_key}')"
        )
    for key in entry.input_keys:
        if key in options:
            raise LmcError(
                f"key 'model.{key}'{where(source)} is set by lmc (sizes come from the dataset)"
            )
    for key in options:
        if key not in entry.options:
            raise LmcError(
                f"unknown key 'model.{key}'{where(source)} for {name}; known: "
                f"{', '.join(sorted(entry.options))}"
            )
    try:
        # checked against the dataset's example shape (a ViT's patch must divide its images)
        check_options(name, {**data_given(entry, data), **options})
    except LmcError as exc:
        raise LmcError(f"[model]{where(source)}: {exc}") from None
    return {"name": name, **entry.options, **options}


def data_given(entry: Any, data: dict[str, Any] | None) -> dict[str, Any]:
    """The options the model registry ``entry`` reads off the study's dataset (its example
    shape; the class count as a placeholder, not checked here), or ``{}`` when the dataset is
    not known yet."""
    if not data or data.get("dataset") not in ALL_DATASETS:
        return {}
    try:
        shape = input_shape(data["dataset"], **data.get("options", {}))
        given = entry.data_options(shape, 10, dataset_task(data["dataset"]))
    except (LmcError, TypeError, ValueError):
        return {}  # the dataset's own check names the problem
    given.pop("num_classes", None)
    return given


def resolve_train(given: Any, set_in: str, source: str | None) -> dict[str, Any]:
    """The ``[train]`` table (:data:`TRAIN_KEYS`: the seeds and the weight decay are set in the
    table ``set_in``, e.g. ``[sweep]``), checked."""
    if not isinstance(given, dict):
        raise LmcError(f"'train'{where(source)} must be a table ([train])")
    unknown = set(given) - TRAIN_KEYS
    if unknown:
        raise LmcError(
            f"unknown key 'train.{sorted(unknown)[0]}'{where(source)}; known: "
            f"{', '.join(sorted(TRAIN_KEYS))} (weight decays and seeds are set in {set_in})"
        )
    try:
        TrainSettings.from_dict(given)
    except LmcError as exc:
        raise LmcError(f"[train]{where(source)}: {exc}") from None
    return copy.deepcopy(given)


def resolve_trained(
    raw: dict[str, Any], kind: str, top_level: tuple[str, ...], source: str | None
) -> dict[str, Any]:
    """The tables every kind that trains models shares, checked: ``name``,
    ``description``, ``experiment`` (``kind``), ``[data]``, ``[model]`` and ``[train]``; the
    width, the weight decay and the seeds are set in the kind's own table ``[<kind>]`` (its
    name with ``-`` as ``_``), whose key ``width`` the error on ``model.width`` names."""
    own = f"[{kind.replace('-', '_')}]"
    name, description = header(raw, kind, top_level, source)
    data = resolve_data(raw.get("data", {}), source)
    return {
        "name": name,
        "description": description,
        "experiment": kind,
        "data": data,
        "model": resolve_model(raw.get("model", {}), data, own, source),
        "train": resolve_train(raw.get("train", {}), own, source),
    }
