"""The settings of a merge-many study (``experiment = "merge-many"``): the study file's keys,
their defaults and checks (:func:`resolve_merge_many`). What the study does with them:
:mod:`lmc.experiments.merge_many_study`.

``methods`` lists ``none``, ``weight`` and any registered method that aligns canonical forms
(:func:`lmc.merge.many.canonical_methods`: ``canonical``, the control, ``orthogonal``,
``orthogonal-activation``, ``learned``: pre-LN transformers merged beyond permutations). Such a
method's settings are ``[merge_many]`` keys ``<method>_<setting>`` (as ``[merge]``'s in a width
study, e.g. ``learned_steps``), recorded only where given; ``align_examples`` training examples
are read by the methods that read data.

``data.options.train_size`` (with ``subset_seed``) is allowed when every set is ``subset =
"all"``: every model then trains on that one seeded subset, as a width study's runs do, so a
set's models are the width study's runs of the same settings (seeds ``seed``, ``seed + 1``, ...)
through the run store.
"""

from __future__ import annotations

from typing import Any

from lmc.config import LmcError, check_int, check_number
from lmc.metrics.ece import DEFAULT_BINS

from .jobs import align_options
from .kind_settings import resolve_trained, table, typed, where

KIND = "merge-many"
TOP_LEVEL = ("name", "description", "experiment", "data", "model", "train", "merge_many", "sets")
#: The merges with a scheme of their own; every other method is one aligning canonical forms.
OWN_METHODS = ("none", "weight")
#: Dataset options a set's ``subset`` chooses; a shared ``train_size`` needs subset "all".
SHARED_SUBSET = ("train_size", "subset_seed")
SUBSETS = ("all", "random", "labels")
BN_MODES = ("auto", "reset", "none")
#: key -> (allowed types, default; ... = required) of ``[merge_many]``.
SETTINGS: dict[str, tuple[tuple[type, ...], Any]] = {
    "width": ((int, float), ...),
    "weight_decay": ((float, int), 3e-3),
    "seed": ((int,), 0),
    "methods": ((list,), ["none", "weight"]),
    "reference": ((bool,), True),
    "ece_bins": ((int,), DEFAULT_BINS),
    "max_rounds": ((int,), 100),
    "bn": ((str,), "auto"),
    "align_examples": ((int,), 2000),
}
#: The reference model's init and data seed, past the study's ``seed``.
REFERENCE_SEED = 1000
#: key -> (allowed types, default) of each ``[[sets]]`` entry.
SET_KEYS: dict[str, tuple[tuple[type, ...], Any]] = {
    "name": ((str,), ...),
    "models": ((int,), ...),
    "subset": ((str,), "all"),
    "train_fraction": ((float, int), None),
    "label_parts": ((list,), None),
    "seed": ((int,), None),
}


def _resolve_set(entry: Any, i: int, num_classes: int | None, source: str | None) -> dict:
    at = where(source)
    entry = table(entry, SET_KEYS, f"sets[{i}]", source)
    label = f"sets[{i}] ({entry['name']})"
    if not entry["name"] or not entry["name"].replace("-", "").replace("_", "").isalnum():
        raise LmcError(f"'{label}.name'{at} must be a plain name (letters, digits, - and _)")
    check_int(f"'{label}.models'{at}", entry["models"], minimum=2)
    if entry["subset"] not in SUBSETS:
        raise LmcError(f"'{label}.subset'{at} must be one of {', '.join(SUBSETS)}")
    if entry["subset"] == "random":
        if entry["train_fraction"] is None:
            raise LmcError(f"'{label}'{at}: subset 'random' needs train_fraction")
        check_number(
            f"'{label}.train_fraction'{at}", entry["train_fraction"], positive=True, maximum=1.0
        )
        entry["train_fraction"] = float(entry["train_fraction"])
    elif entry["train_fraction"] is not None:
        raise LmcError(f"'{label}.train_fraction'{at} is for subset 'random' only")
    if entry["subset"] == "labels":
        parts = entry["label_parts"]
        if parts is None or len(parts) != entry["models"]:
            raise LmcError(
                f"'{label}.label_parts'{at} must list one part (a list of per-label "
                f"fractions) per model: {entry['models']} parts"
            )
        for s, row in enumerate(parts):
            ok = isinstance(row, list) and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1 for v in row
            )
            if not ok or (num_classes is not None and len(row) != num_classes):
                size = f"{num_classes} " if num_classes is not None else ""
                raise LmcError(
                    f"'{label}.label_parts[{s}]'{at} must list {size}fractions in [0, 1], "
                    f"one per label, got {row!r}"
                )
        for k in range(len(parts[0])):
            total = sum(row[k] for row in parts)
            if total > 1 + 1e-9:
                raise LmcError(
                    f"'{label}.label_parts'{at}: the fractions of label {k} add up to "
                    f"{total:g} > 1 (the parts are disjoint)"
                )
    elif entry["label_parts"] is not None:
        raise LmcError(f"'{label}.label_parts'{at} is for subset 'labels' only")
    if entry["seed"] is None:
        del entry["seed"]  # the study's seed; left out so that earlier sets keep their ids
    else:
        check_int(f"'{label}.seed'{at}", entry["seed"], minimum=0)
    return entry


def merge_methods() -> tuple[str, ...]:
    """The methods a merge-many study may list: :data:`OWN_METHODS`, then every registered
    method that aligns canonical forms."""
    from lmc.merge.many import canonical_methods

    return (*OWN_METHODS, *canonical_methods())


def _method_settings(given: dict[str, Any], source: str | None) -> dict[str, Any]:
    """The ``<method>_<setting>`` keys of ``given`` (a raw ``[merge_many]``) that name a
    setting of a canonical method, checked by type as a width study's ``[merge]`` checks them;
    removed from ``given``."""
    from lmc.perm.methods import study_keys

    from .width_settings import merge_schema

    schema = merge_schema()
    canonical = set(merge_methods()) - set(OWN_METHODS)
    out = {}
    for key, (method, _) in study_keys().items():
        if key in given and method.name in canonical:
            value = given.pop(key)
            out[key] = (
                value
                if value is None
                else typed(f"merge_many.{key}", value, schema[key][0], source)
            )
    return out


def method_options(settings: dict[str, Any], method: str) -> dict[str, Any]:
    """The settings canonical ``method`` merges with, read from a resolved ``[merge_many]``
    (``settings``) as a width study's merge reads its ``[merge]``
    (:func:`lmc.experiments.jobs.align_options`), checked by the method's record."""
    from lmc.perm.methods import get_method

    options = align_options(settings, method)
    get_method(method).resolve(options)
    return options


def method_identity(settings: dict[str, Any], method: str) -> dict[str, Any]:
    """The settings of :func:`method_options` that enter a merge's id: those that change the
    result and differ from their baseline (the rest leave the id as it is)."""
    from lmc.perm.methods import get_method

    record = get_method(method)
    options = method_options(settings, method)
    return {  # options holds every setting that changes the result
        name: value
        for name, value in options.items()
        if record.setting(name).enters_sweep_id(value)
    }


def resolve_merge_many(raw: dict[str, Any], source: str | None = None) -> dict[str, Any]:
    """Check a parsed merge-many study and fill in its defaults (module docstring)."""
    at = where(source)
    study = resolve_trained(raw, KIND, TOP_LEVEL, source)
    raw_sets = raw.get("sets")
    shared = isinstance(raw_sets, list) and all(
        isinstance(e, dict) and e.get("subset", "all") == "all" for e in raw_sets
    )
    for key in ("train_size", "label_parts", "label_part", "subset_seed"):
        if key in study["data"]["options"] and not (shared and key in SHARED_SUBSET):
            raise LmcError(
                f"'data.options.{key}'{at}: each set chooses its models' "
                "training data ([[sets]] subset); a shared train_size needs every set's "
                'subset to be "all"'
            )
    raw_table = raw.get("merge_many", {})
    given = dict(raw_table) if isinstance(raw_table, dict) else raw_table
    extra = _method_settings(given, source) if isinstance(given, dict) else {}
    settings = {**table(given, SETTINGS, "merge_many", source), **extra}
    from lmc.models import get_model

    try:
        get_model(study["model"]["name"]).width_value(settings["width"])
    except LmcError as exc:
        raise LmcError(f"'merge_many.width'{at}: {exc}") from None
    check_number(f"'merge_many.weight_decay'{at}", settings["weight_decay"], minimum=0.0)
    check_int(f"'merge_many.seed'{at}", settings["seed"], minimum=0)
    check_int(f"'merge_many.ece_bins'{at}", settings["ece_bins"], minimum=1)
    check_int(f"'merge_many.max_rounds'{at}", settings["max_rounds"], minimum=1)
    check_int(f"'merge_many.align_examples'{at}", settings["align_examples"], minimum=1)
    choices = merge_methods()
    if not settings["methods"] or any(m not in choices for m in settings["methods"]):
        raise LmcError(
            f"'merge_many.methods'{at} must list some of "
            f"{', '.join(choices)}, got {settings['methods']!r}"
        )
    for method in settings["methods"]:
        if method not in OWN_METHODS:
            try:
                method_options(settings, method)
            except LmcError as exc:
                raise LmcError(f"'merge_many'{at}: {exc}") from None
    from lmc.perm.methods import study_keys

    keys = study_keys()
    for key in extra:
        method = keys[key][0].name
        if method not in settings["methods"]:
            raise LmcError(
                f"'merge_many.{key}'{at} is a setting of method {method!r}, which "
                "'merge_many.methods' does not list"
            )
    if settings["bn"] not in BN_MODES:
        raise LmcError(f"'merge_many.bn'{at} must be one of {', '.join(BN_MODES)}")
    sets = raw.get("sets")
    if not isinstance(sets, list) or not sets:
        raise LmcError(f"'sets'{at}: give at least one [[sets]] table (name, models, ...)")
    classes = _num_classes(study["data"])
    resolved = [_resolve_set(entry, i, classes, source) for i, entry in enumerate(sets)]
    names = [s["name"] for s in resolved]
    if len(set(names)) != len(names):
        raise LmcError(f"'sets'{at}: set names must differ, got {names}")
    return {**study, "merge_many": settings, "sets": resolved}


def _num_classes(data: dict[str, Any]) -> int | None:
    """The dataset's class count when it is known without loading (digits, MNIST, ...)."""
    if data["dataset"] == "synthetic":
        return data["options"].get("num_classes", 10)
    return 100 if data["dataset"] == "cifar100" else 10
