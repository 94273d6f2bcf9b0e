"""The report of a study with variants: each variant's own report, and an index beside them.

A results folder written by ``lmc sweep`` for a study with ``[[variants]]``
(:mod:`lmc.experiments.variants`) holds ``variants.json``, ``variants.csv`` and one ordinary
results folder per variant. :func:`lmc.report.write_report` writes each variant's report in
its folder and the index (:func:`variants_page`; ``report.md``, ``report.html``): the
variants, the settings each changes, and Table 1's headline columns across all of them
(λ = ½, mean ± the half-width of its 95 % t-interval over pairs, n pairs per row), so a
second axis (depth, activation) reads in one table; for
another kind (merge-many), the rows of each variant's first table.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from lmc.config import LmcError
from lmc.experiments.cells import read_csv
from lmc.store import read_json

from .document import Block, Bullets, Heading, Para, Table
from .page import Page

VARIANTS_FILE = "variants.json"

#: Table 1 columns shown across variants: (column in variants.csv, header, format).
COLUMNS = (
    ("width", "width", "{:g}"),
    ("weight_decay", "weight decay", "{:g}"),
    ("method", "method", "{}"),
    ("pairs", "n", "{:g}"),
    ("endpoint_accuracy_mean", "endpoints", "{:.1%}"),
    ("merged_accuracy_mean", "merged", "{:.1%}"),
    ("calibrated_midpoint_loss_barrier_mean", "calibrated loss barrier (nats)", "{:.3f}"),
    ("inverse_temperature_mean", "β(½)", "{:.2f}"),
    ("ensemble_inverse_temperature_mean", "ensemble β(½)", "{:.2f}"),
)


def is_variants_folder(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds the results of a study with variants."""
    return (Path(path) / VARIANTS_FILE).is_file()


def _estimate(row: dict[str, Any], column: str, fmt: str) -> str:
    """``row[column]`` formatted by ``fmt``, with ``± h`` (the same format) where the row has
    the half-width of the column's 95 % t-interval (``<name>_ci95`` beside ``<name>_mean``, as
    Table 1 writes it)."""
    text = _cell(row.get(column), fmt)
    if not column.endswith("_mean"):
        return text
    half = row.get(column.removesuffix("_mean") + "_ci95")
    if isinstance(half, float) and math.isfinite(half) and text not in ("–", "undefined"):
        text += " ± " + _cell(half, fmt)
    return text


def _cell(value: Any, fmt: str) -> str:
    if value in (None, ""):
        return "–"
    if isinstance(value, float) and not math.isfinite(value):
        return "undefined"
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def read_variants(results: Path) -> dict[str, Any]:
    """``variants.json`` of the results folder ``results``, checked to list variants (each
    ``{"name", "folder", "changed"}``)."""
    record = read_json(results / VARIANTS_FILE, "variants record")
    variants = record.get("variants") if isinstance(record, dict) else None
    if not isinstance(variants, list) or not variants:
        raise LmcError(f"{results / VARIANTS_FILE} lists no variants; re-run `lmc sweep`")
    return record


def variants_page(results: Path, record: dict[str, Any], title: str | None = None) -> Page:
    """The index of the study with variants in ``results`` (``record``: its
    :func:`read_variants`); a page without figures (each variant's report has its own)."""
    variants = record["variants"]
    rows = read_csv(results / "variants.csv")
    keys = sorted({k for v in variants for k in v.get("changed", {})})
    title = title or f"Linear mode connectivity: {record.get('name', 'study')} (variants)"
    blocks: list[Block] = []
    blocks.append(
        Para(
            f"{len(variants)} variants of one study, each a full study with its own report "
            f"(its folder's `report.html`); they differ only in {', '.join(keys)}."
        )
    )
    blocks.append(
        Bullets(
            [
                f"`{v['folder']}/report.html`: "
                + ", ".join(f"{k} = {v['changed'][k]}" for k in sorted(v.get("changed", {})))
                for v in variants
            ]
        )
    )
    if not rows or any(col in rows[0] for col, _, _ in COLUMNS[3:]):
        blocks.append(Heading(2, "Table 1 across variants"))
        header = ["variant", *keys, *(h for _, h, _ in COLUMNS)]
        body = [
            [str(r["variant"]), *(str(r.get(k, "")) for k in keys)]
            + [_estimate(r, col, fmt) for col, _, fmt in COLUMNS]
            for r in rows
        ]
        caption = (
            "λ = ½, mean ± the half-width of its 95 % t-interval over the n pairs; "
            "the rows come from `variants.csv`."
        )
    else:  # another kind (merge-many): its first table's rows, every column as written
        blocks.append(Heading(2, "Results across variants"))
        header = [k for k in rows[0] if k not in keys]
        body = [[str(r["variant"])] + [_cell(r.get(k), "{:.4g}") for k in header[1:]] for r in rows]
        caption = "Each variant's first results table, as in `variants.csv`."
    blocks.append(Table(header, body, caption=caption, wide=True))
    return Page(title, lambda _: blocks, record, figures=False)
