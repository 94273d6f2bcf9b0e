"""A pair's files: ``curve.csv``, ``summary.json``, ``path.png``/``path.svg`` and the
analysis' files.

``summary(result)`` is the JSON object ``lmc interpolate --json`` / ``lmc analyze --json``
print and ``summary.json`` holds; ``write_pair`` writes the folder whole or not at all.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lmc.metrics import PER_LAMBDA_KEYS, PathResult
from lmc.store import jsonable, output_dir, write_json, write_text

from .figures import plot_path
from .pipeline import PairResult

CURVE_FILE, SUMMARY_FILE, PATH_FIGURE = "curve.csv", "summary.json", "path.png"
#: The formats the pair's figures are saved in (``path.png`` and ``path.svg`` beside it).
FIGURE_FORMATS = ("png", "svg")


def path_summary(path: PathResult) -> dict[str, Any]:
    """The per-λ curve, every barrier and how the path was measured (no metadata), including
    the calibration used (``calibration_method``: ``split`` or ``crossfit``, ``None`` when not
    calibrated; ``calibration_folds``: K of ``crossfit``) and the λ whose calibration is
    undefined (``calibration_at_bound``: their β and calibrated loss are ``null``)."""
    return {
        **path.curves(),
        **path.barriers(),
        "bn": path.bn,
        "method": path.method,
        "calibrate": path.calibrate,
        "calibration_method": path.calibration_method,
        "calibration_folds": path.calibration_folds,
        "calibration_seed": path.calibration_seed,
        "calibration_fraction": path.calibration_fraction,
        "num_examples": path.num_examples,
        "num_calibration": path.num_calibration,
        "num_heldout": path.num_heldout,
        "added_lambdas": path.added_lambdas,
        "calibration_at_bound": path.calibration_at_bound,
        "ensemble_calibration_at_bound": path.ensemble_calibration_at_bound,
    }


def summary(result: PairResult, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON-ready summary of a pair: the path's keys (curve, barriers, calibration), the
    alignment (``align``, ``align_info``), the analysis (``layers``, ``settings``, ``theory``)
    when run, ``stitch_errors`` when measured, and ``meta`` (runs, model, dataset,
    environment, ...) added at the top level.
    Without a path (``lmc analyze``) the alignment is recorded in ``settings``."""
    settings = result.settings
    out: dict[str, Any] = {}
    if result.path is not None:
        out.update(align=settings.align, align_info=result.alignment)
        out.update(split=settings.split, seed=settings.seed)
        out.update(path_summary(result.path), baseline=None)
    if result.baseline is not None:
        out["baseline"] = {
            "kind": settings.baseline,
            "seed": settings.seed,
            "filter_normalize": False,
            **result.baseline.curves(),
            **result.baseline.barriers(),
        }
    if result.analysis is not None:
        analysis = result.analysis
        out["layers"] = analysis.records
        out["settings"] = {
            **analysis.settings,
            "split": settings.split,
            "align": settings.align,
            "seed": settings.seed,
        }
        if result.path is None:
            out["settings"]["align_info"] = result.alignment
        out["theory"] = analysis.theory(seed=settings.seed)
    if result.stitch_errors is not None:
        out["stitch_errors"] = list(result.stitch_errors)
    out.update(meta or {})
    return jsonable(out)


def curve_csv(result: PairResult, more: Sequence[tuple[str, PathResult]] = ()) -> str:
    """``curve.csv``: one row per (path, λ) with every per-λ metric (empty when not computed):
    the line's (``path`` = ``interpolation``) and the random-direction baseline's, then those
    of each ``(name, path)`` of ``more`` (``path`` = its name: a curve's kind)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["path", "lambda", *PER_LAMBDA_KEYS])
    paths = [("interpolation", result.path), ("random-direction", result.baseline), *more]
    for name, path in paths:
        for row in path.rows() if path is not None else []:
            values = ["" if row[k] is None else repr(float(row[k])) for k in PER_LAMBDA_KEYS]
            writer.writerow([name, repr(float(row["lambda"])), *values])
    return buf.getvalue()


#: Files whose presence marks a folder as an earlier pair output (so it may be replaced whole).
OUTPUT_MARKS = (SUMMARY_FILE, CURVE_FILE)


def write_pair(
    result: PairResult,
    out: str | os.PathLike,
    summary_data: dict[str, Any] | None = None,
    *,
    figures: bool = True,
    title: str = "",
) -> list[Path]:
    """Write the pair's files into folder ``out`` (replaced whole; nothing left on failure).

    Path: ``curve.csv`` and ``path.png`` with ``path.svg`` beside it; analysis: ``layers.csv``,
    ``units.safetensors`` and its figures, each PNG with an SVG beside it
    (``lmc.analysis.output.write_results``); always ``summary.json``, holding ``summary_data``
    (default: :func:`summary` of ``result``). ``figures=False`` writes no figure. Returns the
    paths written.
    """
    out = Path(out)
    data = summary(result, {"out": str(out)}) if summary_data is None else summary_data
    names: list[str] = []
    with output_dir(out, replaces=OUTPUT_MARKS) as tmp:
        if result.path is not None:
            write_text(tmp / CURVE_FILE, curve_csv(result))
            names.append(CURVE_FILE)
            if figures:
                saved = plot_path(
                    tmp / PATH_FIGURE, result.path, result.baseline, title, formats=FIGURE_FORMATS
                )
                names.extend(p.name for p in saved)
        if result.analysis is not None:
            from lmc.analysis.output import write_results

            written = write_results(result.analysis, tmp, data, figures=figures)
            for p in written:
                # the analysis figures' SVGs lie beside their PNGs (lmc.analysis.figures)
                svg = p.with_suffix(".svg")
                extra = [svg.name] if p.suffix == ".png" and (tmp / svg.name).is_file() else []
                names.extend(n for n in [p.name, *extra] if n != SUMMARY_FILE and n not in names)
        write_json(tmp / SUMMARY_FILE, data)
        names.append(SUMMARY_FILE)
    return [out / name for name in names]
