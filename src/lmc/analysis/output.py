"""Writing a layerwise analysis: a terminal table, ``layers.csv``, ``summary.json``,
``units.safetensors`` (per-unit moments and singular values) and figures. Every file is
written atomically; ``summary.json`` comes last."""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from lmc.store import atomic_path, save_tensors, write_json

from .layer_metrics import column_format, record_keys, table_columns
from .pipeline import AnalysisResult

#: (record key, column title) of the terminal table of the built-in metrics (generated from
#: the metric records, :func:`lmc.analysis.layer_metrics.table_columns`).
TABLE_COLUMNS = table_columns()


def format_cell(value: Any, number: Callable[[float], str]) -> str:
    """A table cell: ``-`` for ``None`` (undefined), ``yes``/``no`` for a bool, ``nan``, a
    float as ``number`` writes it, anything else as ``str``."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else number(value)
    return str(value)


def _number(value: float) -> str:
    if value != 0 and (abs(value) >= 1e4 or abs(value) < 1e-3):
        return f"{value:.2e}"
    return f"{value:.4f}" if abs(value) < 10 else f"{value:.1f}"


def _cell(value: Any) -> str:
    return format_cell(value, _number)


def aligned_lines(header: list[str], rows: list[list[str]]) -> list[str]:
    """The header and rows of a table as lines, each column right-aligned to its widest cell
    and columns two spaces apart."""
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
    return lines


def logit_norm_lines(records: list[dict[str, Any]], cell: Callable[[Any], str]) -> list[str]:
    """One line per λ with the mean logit norms (merged, A, B, LEWC's prediction) of the
    ``logits`` records that have them, each written by ``cell``."""
    return [
        f"lam={r['lam']:g}: mean logit norm: merged {cell(r['logit_norm'])}, "
        f"A {cell(r['logit_norm_a'])}, B {cell(r['logit_norm_b'])}, "
        f"LEWC prediction {cell(r['logit_norm_lewc'])}"
        for r in records
        if r["kind"] == "logits" and r.get("logit_norm") is not None
    ]


def format_table(records: list[dict[str, Any]]) -> str:
    """One row per record (λ outer, layer inner), then the logits' norms per λ."""
    columns = table_columns()
    header = [title for _, title in columns]
    formats = [column_format(key) or _cell for key, _ in columns]
    rows = [[f(r[key]) for f, (key, _) in zip(formats, columns)] for r in records]
    return "\n".join(aligned_lines(header, rows) + logit_norm_lines(records, _cell))


def write_csv(path: str | os.PathLike, records: list[dict[str, Any]]) -> None:
    """``records`` as CSV with columns :func:`lmc.analysis.layer_metrics.record_keys` (those
    of every registered metric); None and NaN are empty cells."""
    keys = record_keys()
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(keys))
        writer.writeheader()
        for record in records:
            writer.writerow({k: _csv_value(record[k]) for k in keys})


def _csv_value(value: Any) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return repr(value) if isinstance(value, float) else value


def write_results(
    result: AnalysisResult,
    out_dir: str | os.PathLike,
    summary: dict[str, Any],
    *,
    figures: bool = True,
) -> list[Path]:
    """Write the analysis into ``out_dir``; ``summary`` is the JSON-ready object for
    summary.json (no NaN: e.g. ``lmc.store.jsonable(...)``). Returns the paths written."""
    from .figures import plot_cosines, plot_moments, plot_spectra

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "layers.csv", out / "units.safetensors"]
    write_csv(paths[0], result.records)
    tensors = {
        f"{kind}.{name}.{side}": torch.from_numpy(values.copy())
        for kind, table in (("moments", result.moments), ("spectra", result.spectra))
        for name, sides in table.items()
        for side, values in sides.items()
    }
    save_tensors(paths[1], tensors, metadata={"layout": "{moments|spectra}.{probe}.{a|b}"})
    if figures:
        paths += [out / "cosines.png", out / "moments.png"]
        plot_cosines(result.records, paths[2])
        plot_moments(result.moments, paths[3])
    if figures and result.spectra:
        paths.append(out / "spectra.png")
        plot_spectra(result.spectra, paths[-1])
    paths.append(out / "summary.json")
    write_json(paths[-1], summary)
    return paths
