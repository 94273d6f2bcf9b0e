"""Table 1 of the width paper: barriers and accuracies at λ = ½, mean ± std over pairs.

``table1`` turns the tidy ``results.csv`` rows into one row per (width, weight decay, method)
with the columns of ``table1.csv`` (``TABLE1_COLUMNS``). Accuracies and the accuracy barrier
stay fractions here (machine-readable); the report shows percent and percentage points.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from .cells import coerce_row, is_close, mean_std, method_sort_key, number

TABLE1_COLUMNS = (
    "width",
    "weight_decay",
    "method",
    "pairs",
    "endpoint_accuracy_mean",
    "merged_accuracy_mean",
    "merged_accuracy_std",
    "ensemble_accuracy_mean",
    "midpoint_accuracy_barrier_mean",
    "midpoint_accuracy_barrier_std",
    "midpoint_loss_barrier_mean",
    "midpoint_loss_barrier_std",
    "calibrated_midpoint_loss_barrier_mean",
    "calibrated_midpoint_loss_barrier_std",
    "inverse_temperature_mean",
    "ensemble_inverse_temperature_mean",
)

# barrier column -> (per-λ column, sign): barrier = sign * (value(½) − ½(value(0) + value(1))).
_MIDPOINT_BARRIERS = {
    "midpoint_loss_barrier": ("loss", 1.0),
    "calibrated_midpoint_loss_barrier": ("calibrated_loss", 1.0),
    "midpoint_accuracy_barrier": ("accuracy", -1.0),
}


def _at(rows: list[dict[str, Any]], lam: float) -> dict[str, Any] | None:
    for r in rows:
        if is_close(r["lam"], lam):
            return r
    return None


def _barrier(column: str, mid: dict, a: dict | None, b: dict | None) -> float:
    """The barrier column of the midpoint row; if absent/NaN, computed from the path."""
    value = number(mid.get(column))
    if math.isfinite(value) or a is None or b is None:
        return value
    key, sign = _MIDPOINT_BARRIERS[column]
    ends = number(a.get(key)) + number(b.get(key))
    return sign * (number(mid.get(key)) - 0.5 * ends)


def int_if_whole(value: float) -> float | int:
    """``value`` as an int when it is a whole number (widths of MLPs print as 16, not 16.0)."""
    return int(value) if math.isfinite(value) and float(value).is_integer() else value


def table1(results: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Table 1 rows from ``results.csv`` rows (dicts; cells may be text or numbers).

    For each (width, weight_decay, method) and each pair, at λ = ½: merged accuracy, ensemble
    accuracy, the midpoint barriers (the ``*_barrier`` columns; computed from the λ = 0, ½, 1
    rows when a column is empty), the midpoint's and ensemble's inverse temperatures; and the
    endpoint accuracy ½(acc(λ=0) + acc(λ=1)). Then mean and sample std (ddof=1; 0 with one
    pair) over pairs, NaN cells skipped. ``pairs`` counts pairs with a λ = ½ row. Rows are
    sorted by weight decay (descending), method (none, weight, activation, ste, random), width.
    """
    groups: dict[tuple, dict[int, list[dict[str, Any]]]] = {}
    for raw in results:
        r = coerce_row(raw)
        r.setdefault("pair", 0)
        r.setdefault("lam", math.nan)
        key = (number(r["width"]), number(r["weight_decay"]), str(r["method"]))
        groups.setdefault(key, {}).setdefault(int(r["pair"]), []).append(r)
    out = []
    for (width, wd, method), by_pair in groups.items():
        per: dict[str, list[float]] = {}
        pairs = 0
        for rows in by_pair.values():
            mid = _at(rows, 0.5)
            if mid is None:
                continue
            pairs += 1
            a, b = _at(rows, 0.0), _at(rows, 1.0)
            endpoint = (
                0.5 * (number(a.get("accuracy")) + number(b.get("accuracy")))
                if a is not None and b is not None
                else math.nan
            )
            values = {
                "endpoint_accuracy": endpoint,
                "merged_accuracy": number(mid.get("accuracy")),
                "ensemble_accuracy": number(mid.get("ensemble_accuracy")),
                "inverse_temperature": number(mid.get("inverse_temperature")),
                "ensemble_inverse_temperature": number(mid.get("ensemble_inverse_temperature")),
            }
            for column in _MIDPOINT_BARRIERS:
                values[column] = _barrier(column, mid, a, b)
            for k, v in values.items():
                per.setdefault(k, []).append(v)
        if pairs == 0:
            continue
        row: dict[str, Any] = {
            "width": int_if_whole(width),
            "weight_decay": wd,
            "method": method,
            "pairs": pairs,
        }
        for column in TABLE1_COLUMNS[4:]:
            base, _, which = column.rpartition("_")
            mean, std, _ = mean_std(per.get(base, []))
            row[column] = mean if which == "mean" else std
        out.append(row)
    out.sort(key=lambda r: (-r["weight_decay"], method_sort_key(r["method"]), r["width"]))
    return out
