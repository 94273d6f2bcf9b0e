"""Experiment kinds: what a study file's top-level ``experiment`` key names, each one record.

``lmc sweep`` runs width studies (``experiment = "width"``, the default: a width x weight
decay x pairs x methods grid) and experiments of other shapes (Git Re-Basin's counterexample,
the onset of connectivity over training, merging many models). Each kind is one
:class:`ExperimentKind` that holds, side by side, everything lmc does differently for it:

- ``resolve``: its settings, checked as strictly as a width study's;
- ``run``: its runner, ``run(study, options)`` with one
  :class:`lmc.experiments.executors.RunOptions`, which writes ``study.json`` (with
  ``"experiment": <kind>``) and its result files into ``options.out`` and reuses finished
  work on a re-run (:mod:`lmc.experiments.kind_run` has the parts every runner shares);
- ``report``: its report, as ``"module:function"`` (or a function); data flows one way
  (experiments -> report), so this package never imports lmc.report: the report package
  imports the function named here when a results folder of this kind is reported
  (:mod:`lmc.report.kinds`);
- ``outputs``: its result tables, file and leading columns;
- ``variants``: the tables a ``[[variants]]`` entry may change (none: the kind takes no
  variants).

:data:`BUILTIN_KINDS` is the one list of lmc's own kinds, the width study among them: there is
no other list to keep in step, and no kind is a special case elsewhere. The kinds' modules do
not import this one (they are below it), so the list imports them plainly, without a circle.

    name = "rebasin-counterexample"
    experiment = "counterexample"
    [counterexample]
    n = 4096

:func:`register_kind` adds a kind of one's own (a plug-in needs no change to lmc: its record
names its report's ``"module:function"``), :func:`get_kind` looks one up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lmc.config import LmcError

from . import (
    counterexample_study,
    merge_many_settings,
    merge_many_study,
    onset_study,
    width_settings,
    width_study,
)
from .executors import RunOptions
from .variants import TABLES as WIDTH_VARIANT_TABLES

#: The kind a study file without an ``experiment`` key is.
DEFAULT_KIND = width_settings.KIND


@dataclass(frozen=True)
class ExperimentKind:
    """One kind of experiment (module docstring).

    ``resolve(raw, source)``: the parsed study file (``raw``; ``source`` names it in errors)
    checked and completed with defaults, an ``LmcError`` naming any unknown key or bad
    value; the result holds ``name``, ``description`` and ``experiment``.
    ``run(study, options)``: runs the resolved study into ``options.out`` (the folder exists;
    :func:`lmc.experiments.run_study` removes it again if the run fails before finishing any
    job) and returns the contents of the ``study.json`` it wrote, whose ``jobs`` counts
    ``total``, ``reused`` and ``run``.
    ``report``: ``"module:function"`` (or the function) of the report, called as
    ``report(folder, title, quiet)`` and returning an :class:`lmc.report.page.Page`; ``None``:
    the kind has no report.
    ``outputs``: key (as in ``study.json``'s ``files``) -> (file name, the columns its rows
    lead with). ``variants``: the tables a ``[[variants]]`` entry may change.
    """

    name: str
    summary: str
    resolve: Callable[[dict[str, Any], str | None], dict[str, Any]]
    run: Callable[[dict[str, Any], RunOptions], dict[str, Any]]
    report: str | Callable[..., Any] | None = None
    outputs: Mapping[str, tuple[str, Sequence[str]]] = field(default_factory=dict)
    variants: tuple[str, ...] = ()


#: lmc's own kinds, the default first: the one list of them.
BUILTIN_KINDS: tuple[ExperimentKind, ...] = (
    ExperimentKind(
        name=DEFAULT_KIND,
        summary="a width x weight decay x pairs x methods grid of merged pairs (the default)",
        resolve=width_settings.resolve_width,
        run=width_study.run_width,
        report="lmc.report.build:width_page",
        outputs=width_study.OUTPUTS,
        variants=WIDTH_VARIANT_TABLES,
    ),
    ExperimentKind(
        name=counterexample_study.KIND,
        summary="Git Re-Basin App. A.6: two perfect solutions no permutation connects",
        resolve=counterexample_study.resolve_counterexample,
        run=counterexample_study.run_counterexample,
        report="lmc.report.counterexample:counterexample_page",
        outputs=counterexample_study.OUTPUTS,
    ),
    ExperimentKind(
        name=merge_many_settings.KIND,
        summary="Git Re-Basin §5.4 / App. A.10: merge N models (all data, random halves, "
        "split by label) against each model, their ensemble and a model on all the data",
        resolve=merge_many_settings.resolve_merge_many,
        run=merge_many_study.run_merge_many,
        report="lmc.report.merge_many:merge_many_page",
        outputs=merge_many_study.OUTPUTS,
        variants=("data", "model", "train", "merge_many"),
    ),
    ExperimentKind(
        name=onset_study.KIND,
        summary="Git Re-Basin Fig. 3: the barrier with and without weight matching over training",
        resolve=onset_study.resolve_onset,
        run=onset_study.run_onset,
        report="lmc.report.onset:onset_page",
        outputs=onset_study.OUTPUTS,
    ),
)

_KINDS: dict[str, ExperimentKind] = {kind.name: kind for kind in BUILTIN_KINDS}


def register_kind(kind: ExperimentKind) -> ExperimentKind:
    """Add ``kind`` to the registry (replacing one of the same name, except the default
    kind, which every study file without an ``experiment`` key is); returns it."""
    if not isinstance(kind, ExperimentKind):
        raise LmcError(f"register_kind needs an ExperimentKind, got {type(kind).__name__}")
    if kind.name == DEFAULT_KIND:
        raise LmcError(f"{DEFAULT_KIND!r} is the width study's own kind; choose another name")
    _KINDS[kind.name] = kind
    return kind


def kind_names() -> list[str]:
    """Every kind a study file may name, lmc's own first (the default first of all)."""
    return list(_KINDS)


def get_kind(name: str, source: str | None = None) -> ExperimentKind:
    """The registered kind ``name``; an unknown name is an ``LmcError`` listing the kinds
    (``source``: the file that named it)."""
    if name not in _KINDS:
        where = f" in {source}" if source else ""
        raise LmcError(
            f"unknown experiment {name!r}{where}: choose one of {', '.join(kind_names())}"
        )
    return _KINDS[name]


def experiment_of(raw: dict[str, Any], source: str | None = None) -> str:
    """The ``experiment`` key of a parsed or resolved study, or of a results folder's
    ``study.json`` (default :data:`DEFAULT_KIND`), checked to be a string."""
    name = raw.get("experiment", DEFAULT_KIND)
    if not isinstance(name, str):
        where = f" in {source}" if source else ""
        raise LmcError(f"key 'experiment'{where} must be str, got {name!r}")
    return name
