"""Table 1 of the width paper: barriers and accuracies at λ = ½: mean, sample std and the
half-width of the mean's 95 % t-interval over pairs.

``table1`` turns the tidy ``results.csv`` rows into one row per (width, weight decay, method)
with the columns of ``table1.csv`` (``TABLE1_COLUMNS``). Accuracies and the accuracy barrier
stay fractions here (machine-readable); the report shows percent and percentage points.

Undefined calibrations (:func:`calibration_undefined`: a β on the bound of its search) never
enter a mean: their inverse temperature and calibrated loss are dropped
(:func:`drop_undefined`) before anything is averaged, and ``undefined_calibration_pairs``
counts, per row, the pairs that lost a value that way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from lmc.metrics import BARRIER_BY_KEY
from lmc.metrics.barriers import DEFAULT_PATH, PATH_KEY, path_kind_of
from lmc.metrics.calibration import BETA_MAX, BETA_MIN

from .cells import coerce_row, is_close, mean_std, method_sort_key, number

#: The barriers of Table 1 (keys of :data:`lmc.metrics.BARRIERS`: the midpoint ones, the width
#: paper's), each as ``<key>_mean``, ``<key>_std`` and ``<key>_ci95`` (the half-width of the
#: mean's 95 % t-interval over the pairs, :func:`ci95_half_width`) in :data:`TABLE1_COLUMNS`.
TABLE1_BARRIERS = (
    "midpoint_accuracy_barrier",
    "midpoint_loss_barrier",
    "calibrated_midpoint_loss_barrier",
)
#: The columns of ``table1.csv`` (the width paper's Table 1 shape: one row per width, weight
#: decay and method; every value at λ = ½, mean, std and 95 % half-width over pairs).
TABLE1_COLUMNS = (
    "width",
    "weight_decay",
    "method",
    "pairs",
    "endpoint_accuracy_mean",
    "endpoint_train_loss_mean",
    "merged_accuracy_mean",
    "merged_accuracy_std",
    "merged_accuracy_ci95",
    "ensemble_accuracy_mean",
    *(f"{key}_{stat}" for key in TABLE1_BARRIERS for stat in ("mean", "std", "ci95")),
    "inverse_temperature_mean",
    "ensemble_inverse_temperature_mean",
    "undefined_calibration_pairs",
)

#: results.csv flag -> the per-λ values it makes undefined (lmc.experiments.results).
UNDEFINED_WITH = {
    "calibration_at_bound": ("inverse_temperature", "calibrated_loss"),
    "ensemble_calibration_at_bound": ("ensemble_inverse_temperature", "ensemble_calibrated_loss"),
}


def ci95_half_width(std: float, n: int) -> float:
    """Half-width of the 95 % t-interval of a mean of ``n`` values with sample std ``std``:
    t_{0.975, n-1} · std / √n (NaN below 2 values), as docs/science.md states."""
    if n < 2 or not math.isfinite(std):
        return math.nan
    from scipy import stats

    return float(stats.t.ppf(0.975, n - 1)) * std / math.sqrt(n)


def beta_on_bound(value: Any) -> bool:
    """Whether a recorded inverse temperature is a finite number on a bound of the β search
    (``lmc.metrics.calibration``: 1e-3 or 1e4, to a relative 1e-6): written by versions that
    recorded the bound's value instead of leaving it undefined."""
    beta = number(value)
    return math.isfinite(beta) and (beta >= BETA_MAX * (1 - 1e-6) or beta <= BETA_MIN * (1 + 1e-6))


def calibration_undefined(row: Mapping[str, Any]) -> dict[str, bool]:
    """Per flag of :data:`UNDEFINED_WITH` (the model θ(λ) and the ensemble): whether the row's
    calibration is undefined, i.e. its results.csv flag is 1 or, for results written before
    the flag, its inverse temperature sits on a bound of the search."""
    return {
        flag: number(row.get(flag)) == 1.0 or beta_on_bound(row.get(columns[0]))
        for flag, columns in UNDEFINED_WITH.items()
    }


def drop_undefined(row: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a results row whose undefined values (:func:`calibration_undefined`) are NaN
    and whose flags are set (1) where undefined."""
    out = dict(row)
    for flag, undefined in calibration_undefined(row).items():
        if undefined:
            out[flag] = 1.0
            for column in UNDEFINED_WITH[flag]:
                out[column] = math.nan
    return out


def _at(rows: list[dict[str, Any]], lam: float) -> dict[str, Any] | None:
    for r in rows:
        if is_close(r["lam"], lam):
            return r
    return None


def _barrier(key: str, mid: dict, a: dict | None, b: dict | None) -> float:
    """Midpoint barrier ``key`` of one pair: its column in the λ = ½ row; where that is empty
    or NaN (results written before it was a column), :data:`lmc.metrics.BARRIERS`' function
    of its curve at the λ = 0, ½ and 1 rows."""
    value = number(mid.get(key))
    if math.isfinite(value) or a is None or b is None:
        return value
    barrier = BARRIER_BY_KEY[key]
    return barrier.function([0.0, 0.5, 1.0], [number(r.get(barrier.curve)) for r in (a, mid, b)])


def int_if_whole(value: float) -> float | int:
    """``value`` as an int when it is a whole number (widths of MLPs print as 16, not 16.0)."""
    return int(value) if math.isfinite(value) and float(value).is_integer() else value


def table1(results: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Table 1 rows from ``results.csv`` rows (dicts; cells may be text or numbers).

    For each (width, weight_decay, method, path) and each pair, at λ = ½ (t = ½ for a curve,
    whose rows carry ``path``, ``bezier`` or ``chain``; a line's row has no ``path``, as
    before curves, and results rows without the column are lines): merged accuracy, ensemble
    accuracy, the midpoint barriers (the ``*_barrier`` columns; computed from the λ = 0, ½, 1
    rows when a column is empty), the midpoint's and ensemble's inverse temperatures; and the
    endpoint accuracy ½(acc(λ=0) + acc(λ=1)). Then mean and sample std (ddof=1; 0 with one
    pair) over pairs, NaN cells skipped. ``pairs`` counts pairs with a λ = ½ row. Undefined
    calibrations (:func:`calibration_undefined`) are NaN before anything is computed, so no β
    on a bound enters a mean; ``undefined_calibration_pairs`` counts the pairs with an
    undefined calibration at λ = 0, ½ or 1 (their calibrated barrier is undefined) or of the
    ensemble at λ = ½. Rows are sorted by weight decay (descending), method (none, weight, onepass,
    activation, ste, orthogonal, orthogonal-activation, learned, random: `cells.METHOD_ORDER`),
    path (the line first), width.
    """
    groups: dict[tuple, dict[int, list[dict[str, Any]]]] = {}
    for raw in results:
        r = drop_undefined(coerce_row(raw))
        r.setdefault("pair", 0)
        r.setdefault("lam", math.nan)
        key = (number(r["width"]), number(r["weight_decay"]), str(r["method"]), path_kind_of(r))
        groups.setdefault(key, {}).setdefault(int(r["pair"]), []).append(r)
    out = []
    for (width, wd, method, path), by_pair in groups.items():
        per: dict[str, list[float]] = {}
        pairs = undefined = 0
        for rows in by_pair.values():
            mid = _at(rows, 0.5)
            if mid is None:
                continue
            pairs += 1
            a, b = _at(rows, 0.0), _at(rows, 1.0)
            flags = [
                number(r.get("calibration_at_bound")) == 1.0 for r in (a, mid, b) if r is not None
            ]
            flags.append(number(mid.get("ensemble_calibration_at_bound")) == 1.0)
            undefined += any(flags)
            endpoint = (
                0.5 * (number(a.get("accuracy")) + number(b.get("accuracy")))
                if a is not None and b is not None
                else math.nan
            )
            values = {
                "endpoint_accuracy": endpoint,
                "endpoint_train_loss": number(mid.get("endpoint_train_loss")),
                "merged_accuracy": number(mid.get("accuracy")),
                "ensemble_accuracy": number(mid.get("ensemble_accuracy")),
                "inverse_temperature": number(mid.get("inverse_temperature")),
                "ensemble_inverse_temperature": number(mid.get("ensemble_inverse_temperature")),
            }
            for key in TABLE1_BARRIERS:
                values[key] = _barrier(key, mid, a, b)
                if BARRIER_BY_KEY[key].curve == "calibrated_loss" and any(flags[:-1]):
                    values[key] = math.nan  # an endpoint's or the midpoint's is undefined
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
            if column == "undefined_calibration_pairs":
                row[column] = undefined
                continue
            base, _, which = column.rpartition("_")
            mean, std, n = mean_std(per.get(base, []))
            row[column] = {"mean": mean, "std": std, "ci95": ci95_half_width(std, n)}[which]
        width_b = number(next(iter(by_pair.values()))[0].get("width_b"))
        if math.isfinite(width_b):  # a study across widths (sweep.width_ratio): B's width
            row["width_b"] = int_if_whole(width_b)
        if path != DEFAULT_PATH:  # a curve's row (a line's has no path: as before curves)
            row[PATH_KEY] = path
        out.append(row)
    out.sort(key=table1_sort_key)
    return out


def table1_sort_key(row: Mapping[str, Any]) -> tuple:
    """Table 1's order: weight decay (descending), method (:func:`method_sort_key`), the
    line before the curves (``bezier``, ``chain``), width."""
    path = path_kind_of(row)
    return (
        -row["weight_decay"],
        method_sort_key(row["method"]),
        path != DEFAULT_PATH,
        path,
        row["width"],
    )
