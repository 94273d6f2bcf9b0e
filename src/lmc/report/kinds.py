"""Which report a results folder gets, and :func:`write_report`, which writes it.

A results folder's ``study.json`` names its experiment kind in ``experiment`` (absent: a width
study, the default). The kind's one record (:mod:`lmc.experiments.kinds`) names its report as
``"module:function"``; it is imported here on first use, so lmc.experiments never imports
lmc.report and this module imports no report of its own: the list of kinds, with their
reports, is that record list alone. A report is ``report(folder, title, quiet) -> Page``
(:class:`lmc.report.page.Page`), written by :func:`lmc.report.page.write_document`. A folder
of a study with variants gets each variant's report and an index (:mod:`lmc.report.variants`).

:func:`register_report` (attach a report to an already registered kind) is kept for plug-ins
written before reports lived in the kind's record; it is deprecated: give the report in the
:class:`lmc.experiments.kinds.ExperimentKind` instead.
"""

from __future__ import annotations

import importlib
import json
import os
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from lmc.config import LmcError, read_regular_text
from lmc.experiments.kinds import (
    DEFAULT_KIND,
    experiment_of,
    get_kind,
    kind_names,
    register_kind,
)
from lmc.store import check_output_place

from .page import Page, read_record, write_document  # read_record: where it was before
from .variants import is_variants_folder, read_variants, variants_page

__all__ = ["experiment_of_folder", "read_record", "register_report", "report_for", "write_report"]

Report = Callable[[Path, "str | None", bool], Page]


def write_report(
    results_dir: str | os.PathLike,
    *,
    out_dir: str | os.PathLike | None = None,
    title: str | None = None,
    quiet: bool = True,
) -> dict[str, Any]:
    """Write ``report.md``, a self-contained ``report.html`` and ``figures/`` (print-resolution
    PNGs, an SVG of each beside it) for a results folder written by ``lmc.experiments``, by
    the report of the folder's kind (module docstring). Never trains or evaluates a model.

    ``out_dir`` defaults to ``results_dir``; ``title`` to one the report makes from the
    study; ``quiet``: no progress bar. Returns ``{"report_md": path, "report_html": path,
    "figures": [png paths]}`` (each PNG's SVG beside it, same stem); for a study with
    variants also ``"variants"`` (each variant's paths), ``figures`` being all of theirs. A
    folder without its kind's result files is an ``LmcError``.
    """
    folder = Path(results_dir)
    out = Path(out_dir) if out_dir is not None else folder
    if is_variants_folder(folder):  # a study with variants: theirs and an index
        check_output_place(out, "report folder")
        record = read_variants(folder)
        written = {
            v["name"]: write_report(folder / v["folder"], out_dir=out / v["folder"], quiet=quiet)
            for v in record["variants"]
        }
        index = write_document(out, variants_page(folder, record, title))
        figures = [f for paths in written.values() for f in paths["figures"]]
        return {**index, "figures": figures, "variants": written}
    report = report_for(folder)
    if isinstance(report, _Deprecated):  # a plug-in's report that writes its own files
        return report.write(folder, out_dir=out_dir, title=title, quiet=quiet)
    return write_document(out, report(folder, title, quiet))


def experiment_of_folder(results_dir: str | os.PathLike) -> str:
    """The ``experiment`` recorded in ``results_dir/study.json`` (the default kind when there
    is no readable record or it names none)."""
    try:
        record = json.loads(read_regular_text(Path(results_dir) / "study.json", "study record"))
        return experiment_of(record if isinstance(record, dict) else {})
    except (OSError, ValueError, LmcError):
        return DEFAULT_KIND


def report_for(results_dir: str | os.PathLike) -> Report:
    """The report of the folder's kind (its record's ``report``, imported on first use); a
    kind that is not registered, or has no report, is an ``LmcError``."""
    name = experiment_of_folder(results_dir)
    try:
        report = get_kind(name).report
    except LmcError:
        report = None
    if report is None:
        known = ", ".join(k for k in kind_names() if get_kind(k).report is not None)
        raise LmcError(
            f"{results_dir} holds an experiment of kind {name!r}, which has no report "
            f"(reports exist for {known})"
        )
    if isinstance(report, str):
        module, _, function = report.partition(":")
        try:
            report = getattr(importlib.import_module(module), function)
        except (ImportError, AttributeError) as exc:
            raise LmcError(
                f"the report {report!r} of experiment {name!r} cannot be imported: {exc}"
            ) from exc
    return report


class _Deprecated:
    """A report registered with :func:`register_report`: ``(results_dir, *, out_dir, title,
    quiet) -> {"report_md", "report_html", "figures"}``, writing its own files."""

    def __init__(self, write: Callable[..., dict[str, Any]]) -> None:
        self.write = write


def register_report(kind: str, report: Callable[..., dict[str, Any]]) -> None:
    """Deprecated: name the report in the kind's :class:`lmc.experiments.kinds.ExperimentKind`
    (``report="module:function"``, a function ``(folder, title, quiet) -> Page``).

    Use ``report`` (``(results_dir, *, out_dir, title, quiet) -> dict``, writing its own
    files) for results folders of the registered kind ``kind``."""
    warnings.warn(
        "lmc.report.kinds.register_report is deprecated: give the report in the kind's "
        "ExperimentKind(report='module:function')",
        DeprecationWarning,
        stacklevel=2,
    )
    register_kind(replace(get_kind(kind), report=_Deprecated(report)))
