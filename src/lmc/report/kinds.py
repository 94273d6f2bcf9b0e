"""Reports of experiment kinds other than width studies (:mod:`lmc.experiments.kinds`).

A results folder's ``study.json`` names its kind in ``experiment`` (absent: a width study,
reported by :func:`lmc.report.write_report` itself). Each other kind has a report function
``(results_dir, *, out_dir, title, quiet) -> {"report_md", "report_html", "figures"}``;
:func:`register_report` adds one for a kind of one's own.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: lmc's own kinds: name -> "module:function" of its report.
BUILTIN_REPORTS = {
    "counterexample": "lmc.report.counterexample:write_counterexample_report",
    "merge-many": "lmc.report.merge_many:write_merge_many_report",
    "onset": "lmc.report.onset:write_onset_report",
}
_REPORTS: dict[str, Callable[..., dict[str, Any]]] = {}


def register_report(kind: str, report: Callable[..., dict[str, Any]]) -> None:
    """Use ``report`` for results folders whose ``study.json`` says ``experiment = kind``."""
    _REPORTS[kind] = report


def experiment_of_folder(results_dir: str | os.PathLike) -> str | None:
    """The ``experiment`` recorded in ``results_dir/study.json``; ``None`` when there is no
    readable record or it names none (a width study)."""
    try:
        record = json.loads((Path(results_dir) / "study.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    kind = record.get("experiment") if isinstance(record, dict) else None
    return kind if isinstance(kind, str) and kind != "width" else None


def report_for(results_dir: str | os.PathLike) -> Callable[..., dict[str, Any]] | None:
    """The report function of the folder's kind; ``None`` for a width study. A kind without a
    report is an ``LmcError``."""
    from lmc.config import LmcError

    kind = experiment_of_folder(results_dir)
    if kind is None:
        return None
    if kind not in _REPORTS and kind in BUILTIN_REPORTS:
        module, name = BUILTIN_REPORTS[kind].split(":")
        _REPORTS[kind] = getattr(importlib.import_module(module), name)
    if kind not in _REPORTS:
        known = ", ".join(sorted({*BUILTIN_REPORTS, *_REPORTS}))
        raise LmcError(
            f"{results_dir} holds an experiment of kind {kind!r}, which has no report "
            f"(reports exist for width studies and {known})"
        )
    return _REPORTS[kind]


def read_record(folder: Path, files: tuple[str, ...]) -> tuple[dict[str, Any], str | None]:
    """``(study.json's contents, study.toml's text or None)`` of a kind's results folder, after
    checking that ``study.json`` and each of ``files`` are there (an ``LmcError`` naming the
    first missing one)."""
    from lmc.config import LmcError
    from lmc.store import read_json

    for name in ("study.json", *files):
        if not (folder / name).is_file():
            raise LmcError(f"{folder} has no {name}: run `lmc sweep` on its study first")
    record = read_json(folder / "study.json", "study record")
    toml = folder / "study.toml"
    return record, toml.read_text(encoding="utf-8") if toml.is_file() else None
