"""Table 1 in the report: ``table.csv`` written by ``lmc.experiments`` merged with the same
summary computed from ``results.csv`` (:func:`lmc.experiments.table1`)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from lmc.experiments.cells import method_sort_key, number
from lmc.experiments.table import TABLE1_COLUMNS, int_if_whole, table1

__all__ = ["CALIBRATION_COLUMNS", "TABLE1_COLUMNS", "merge_table1", "table1"]

#: The Table 1 columns that an undefined calibration affects (β means, calibrated barriers and
#: the count of pairs left out): recomputed from results.csv when any calibration is undefined,
#: so a table1.csv written before undefined values were dropped cannot bring a bound value back.
CALIBRATION_COLUMNS = (
    "calibrated_midpoint_loss_barrier_mean",
    "calibrated_midpoint_loss_barrier_std",
    "calibrated_midpoint_loss_barrier_ci95",
    "inverse_temperature_mean",
    "ensemble_inverse_temperature_mean",
    "undefined_calibration_pairs",
)


def merge_table1(
    computed: list[dict[str, Any]],
    given: list[dict[str, Any]] | None,
    recompute: Iterable[str] = (),
) -> list[dict]:
    """Prefer the values of a ``table1.csv`` written by ``lmc.experiments``; fill any column
    or row it lacks from ``computed``, and take the columns of ``recompute`` from
    ``computed`` always."""
    if not given:
        return computed
    recompute = set(recompute)
    index = {(number(r["width"]), number(r["weight_decay"]), r["method"]): r for r in computed}
    out = []
    seen = set()
    for g in given:
        if not all(k in g for k in ("width", "weight_decay", "method")):
            return computed
        key = (number(g["width"]), number(g["weight_decay"]), g["method"])
        seen.add(key)
        base = dict(index.get(key, {}))
        for column in TABLE1_COLUMNS:
            if column in recompute and column in base:
                continue
            value = g.get(column)
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            base[column] = value
        base["width"] = int_if_whole(number(base["width"]))
        base.setdefault("pairs", 0)
        for column in TABLE1_COLUMNS[4:]:
            base.setdefault(column, math.nan)
        out.append(base)
    out += [r for k, r in index.items() if k not in seen]
    out.sort(key=lambda r: (-r["weight_decay"], method_sort_key(r["method"]), r["width"]))
    return out
