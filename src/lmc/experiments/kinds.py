"""Experiment kinds: what a study file's top-level ``experiment`` key names.

``lmc sweep`` runs width studies (``experiment = "width"``, the default: a width x weight
decay x pairs x methods grid, :mod:`lmc.experiments.study`). Experiments of another shape (Git
Re-Basin's counterexample, ...) are kinds: each brings its own table of settings, checked as
strictly as a width study's, and its own runner, which writes ``study.json`` (with
``"experiment": <kind>``), its tidy results files and reuses finished work on a re-run. The
report picks the kind's report from ``study.json`` (:mod:`lmc.report.kinds`).

    name = "rebasin-counterexample"
    experiment = "counterexample"
    [counterexample]
    n = 4096

A kind is an :class:`ExperimentKind`; :func:`register_kind` adds one (a plug-in may add its
own), :func:`get_kind` looks one up, loading lmc's own kinds on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lmc.config import LmcError

#: The kind a study file without an ``experiment`` key is.
DEFAULT_KIND = "width"
#: lmc's own kinds besides width studies: name -> the module that registers it on import.
BUILTIN_KINDS = {
    "counterexample": "lmc.experiments.counterexample_study",
    "merge-many": "lmc.experiments.merge_many_study",
    "onset": "lmc.experiments.onset_study",
}


@dataclass(frozen=True)
class ExperimentKind:
    """One kind of experiment.

    ``resolve(raw, source)``: the parsed study file (``raw``; ``source`` names it in errors)
    checked and completed with defaults, an ``LmcError`` naming any unknown key or bad
    value; the result holds ``name``, ``description`` and ``experiment``.
    ``run(study, out, **options)``: runs the resolved study into the folder ``out`` (options:
    those of :func:`lmc.experiments.run_study`, ``toml_text`` included; a kind ignores those
    it has no use for) and returns the contents of the ``study.json`` it wrote, whose
    ``jobs`` counts ``total``, ``reused`` and ``run``.
    """

    name: str
    summary: str
    resolve: Callable[[dict[str, Any], str | None], dict[str, Any]]
    run: Callable[..., dict[str, Any]]


_KINDS: dict[str, ExperimentKind] = {}


def register_kind(kind: ExperimentKind) -> ExperimentKind:
    """Add ``kind`` to the registry (replacing one of the same name); returns it."""
    if not isinstance(kind, ExperimentKind):
        raise LmcError(f"register_kind needs an ExperimentKind, got {type(kind).__name__}")
    if kind.name == DEFAULT_KIND:
        raise LmcError(f"{DEFAULT_KIND!r} is the width study's own kind; choose another name")
    _KINDS[kind.name] = kind
    return kind


def kind_names() -> list[str]:
    """Every kind a study file may name, width studies first."""
    for module in BUILTIN_KINDS.values():
        importlib.import_module(module)
    return [DEFAULT_KIND, *sorted(_KINDS)]


def get_kind(name: str, source: str | None = None) -> ExperimentKind:
    """The registered kind ``name`` (not ``"width"``, which :mod:`lmc.experiments.study`
    resolves itself); an unknown name is an ``LmcError`` listing the kinds."""
    if name not in _KINDS and name in BUILTIN_KINDS:
        importlib.import_module(BUILTIN_KINDS[name])
    if name not in _KINDS:
        where = f" in {source}" if source else ""
        raise LmcError(
            f"unknown experiment {name!r}{where}: choose one of {', '.join(kind_names())}"
        )
    return _KINDS[name]


def experiment_of(raw: dict[str, Any], source: str | None = None) -> str:
    """The ``experiment`` key of a parsed or resolved study (default ``"width"``), checked to
    be a string."""
    name = raw.get("experiment", DEFAULT_KIND)
    if not isinstance(name, str):
        where = f" in {source}" if source else ""
        raise LmcError(f"key 'experiment'{where} must be str, got {name!r}")
    return name
