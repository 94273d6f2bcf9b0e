"""Study files: a TOML file (or a packaged recipe's name) read, checked and completed.

A study file's top-level ``experiment`` key names its kind (:mod:`lmc.experiments.kinds`;
default ``"width"``, the width study of :mod:`lmc.experiments.width_settings`); the kind's
``resolve`` checks every key (an unknown key or a wrong type is an ``LmcError`` naming it) and
fills in defaults. The resolved study is what gets recorded beside the results. A study file
may list ``[[variants]]`` (:mod:`lmc.experiments.variants`) when its kind takes them.

The width study's names (``SCHEMA``, ``SECTIONS``, ``METHODS``, ...) are importable from here
too, as before they moved to :mod:`lmc.experiments.width_settings`.
"""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path
from typing import Any

from lmc.config import LmcError, read_regular_text

from .kind_settings import MAX_TRAINING_RUNS, TRAIN_KEYS, check_name, where
from .kinds import experiment_of, get_kind, kind_names
from .variants import split_variants
from .width_settings import (
    BN_MODES,
    METHODS,
    SCHEMA,
    SECTIONS,
    WEIGHT_INITS,
    WEIGHT_SOLVERS,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "BN_MODES",
    "MAX_TRAINING_RUNS",
    "METHODS",
    "SCHEMA",
    "SECTIONS",
    "WEIGHT_INITS",
    "WEIGHT_SOLVERS",
    "check_name",
    "list_recipes",
    "load_study",
    "recipe_path",
    "resolve",
    "resolve_file",
]
#: ``[train]``'s keys (:data:`lmc.experiments.kind_settings.TRAIN_KEYS`), by their older name.
_TRAIN_KEYS = TRAIN_KEYS


def resolve(raw: dict[str, Any], source: str | None = None) -> dict[str, Any]:
    """Check a parsed study (one study, no ``[[variants]]``) and fill in its defaults, by the
    rules of the kind its ``experiment`` key names (:mod:`lmc.experiments.kinds`); returns
    the resolved study. ``source`` names the file in errors."""
    return get_kind(experiment_of(raw, source), source).resolve(copy.deepcopy(raw), source)


def load_study(path_or_name: str | os.PathLike) -> tuple[dict[str, Any], str]:
    """Read and resolve a study: a TOML file, or the name of a packaged recipe.

    Returns ``(resolved study, TOML text)``.
    """
    path = Path(path_or_name)
    packaged = None
    if not path.exists():
        packaged = recipe_path(str(path_or_name))
        if packaged is None:
            raise LmcError(
                f"{path} does not exist (and is not a packaged recipe: {', '.join(list_recipes())})"
            )
        path = packaged
    text = read_regular_text(path, "study file")
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LmcError(f"{path} is not valid TOML: {exc}") from exc
    if packaged is None:  # a packaged recipe's relative paths are the current folder's
        raw = paths_beside(raw, path.parent)
    return resolve_file(raw, str(path)), text


def paths_beside(raw: dict[str, Any], folder: str | os.PathLike) -> dict[str, Any]:
    """``raw`` (a parsed study) with each relative file option of its data
    (:data:`lmc.data.text.PATH_OPTIONS`: a text's ``path``, a ``tokenizer`` folder; in
    ``[data] options`` and in every ``[[variants]]``' own) read from ``folder``, the study
    file's folder: rewritten relative to the current folder (absolute when ``folder`` is on
    another drive). A study in the current folder is returned unchanged, so its runs' configs
    (which keep the paths as given) are the same as before; ``~`` and absolute paths and
    tokenizer names (``char``, ...) stay as given."""
    from lmc.data.text import PATH_OPTIONS, TOKENIZERS

    base = Path(folder).resolve()
    if base == Path.cwd().resolve():
        return raw
    out = copy.deepcopy(raw)
    tables = [out.get("data")] + [
        v.get("data") for v in out.get("variants") or [] if isinstance(v, dict)
    ]
    for table in tables:
        options = table.get("options") if isinstance(table, dict) else None
        if not isinstance(options, dict):
            continue
        for key in PATH_OPTIONS:
            value = options.get(key)
            if not isinstance(value, str) or value == "" or value.startswith("~"):
                continue
            if os.path.isabs(value) or (key == "tokenizer" and value in TOKENIZERS):
                continue
            target = base / value
            try:
                options[key] = os.path.relpath(target)
            except ValueError:  # another drive (Windows): no relative form
                options[key] = str(target)
    return out


def resolve_file(raw: dict[str, Any], source: str | None = None) -> dict[str, Any]:
    """Resolve a parsed study file: one study, or with ``[[variants]]`` the record
    ``{"name", "description", "variants": [{"name", "changed", "study"}]}`` whose every
    variant is resolved and validated here, before anything runs
    (:mod:`lmc.experiments.variants`; only kinds that name the tables a variant may change
    take them)."""
    kind = get_kind(experiment_of(raw, source), source)
    if "variants" in raw and not kind.variants:
        takers = [k.name for k in map(get_kind, kind_names()) if k.variants]
        raise LmcError(
            f"[[variants]]{where(source)} are for {' and '.join(takers)} studies, not "
            f"experiment {kind.name!r}"
        )
    variants = split_variants(raw, source, kind.variants)
    if not variants:
        return resolve(raw, source=source)
    return {
        "name": variants[0][1]["name"].removesuffix(f"-{variants[0][0]}"),
        "description": str(raw.get("description", "")),
        "variants": [
            {"name": name, "changed": changed, "study": resolve(study, source=source)}
            for name, study, changed in variants
        ],
    }


def recipes_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "recipes"


def list_recipes() -> list[str]:
    """The names of the packaged recipes (``lmc recipes``), sorted."""
    return sorted(p.stem for p in recipes_dir().glob("*.toml"))


def recipe_path(name: str) -> Path | None:
    """The packaged recipe ``name`` (with or without ``.toml``), or ``None`` if there is none."""
    candidate = recipes_dir() / (name if name.endswith(".toml") else f"{name}.toml")
    return candidate if candidate.exists() else None
