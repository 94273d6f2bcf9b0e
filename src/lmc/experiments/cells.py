"""Cells of the tidy results tables: parsing CSV rows, matching λ, ordering methods, and the
mean ± std over pairs that every summary uses."""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from lmc.config import LmcError, read_regular_text

# Columns kept as text; every other column is parsed as a number.
TEXT_COLUMNS = frozenset(
    {"dataset", "model", "method", "path", "split", "bn", "name", "kind", "variant"}
)
INT_COLUMNS = frozenset({"pair", "layer", "pairs"})
REQUIRED_RESULT_COLUMNS = ("width", "weight_decay", "pair", "method", "lam")
# Canonical order of merge methods in figures and tables; unknown methods follow, sorted.
METHOD_ORDER = (
    "none",
    "canonical",
    "weight",
    "onepass",
    "activation",
    "ste",
    "orthogonal",
    "orthogonal-activation",
    "learned",
    "random",
)


def number(value: Any) -> float:
    """A cell as a float: empty / ``nan`` / ``None`` / unparsable text -> NaN."""
    if value is None:
        return math.nan
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    if not text or text.lower() in ("nan", "none", "null", "na"):
        return math.nan
    try:
        return float(text)
    except ValueError:
        return math.nan


def coerce_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """Parse one CSV row: text columns stay text, ``pair``/``layer`` become int, the rest
    float (empty or ``nan`` cells NaN); a cell that is not a number stays text."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if key is None:  # surplus cells of a ragged row
            continue
        if key in TEXT_COLUMNS:
            out[key] = "" if value is None else str(value)
        elif key in INT_COLUMNS:
            v = number(value)
            out[key] = int(v) if math.isfinite(v) else -1
        else:
            v = number(value)
            text = "" if value is None else str(value).strip()
            # a text cell of another column (a variant's activation, a calibration method)
            # stays text rather than becoming NaN
            unparsable = math.isnan(v) and text.lower() not in ("", "nan", "none", "null", "na")
            out[key] = text if unparsable else v
    return out


def read_csv(path: str | os.PathLike) -> list[dict[str, Any]]:
    """A CSV file as a list of parsed rows (see ``coerce_row``)."""
    path = Path(path)
    text = read_regular_text(path, "results file")  # never waits on a FIFO
    try:
        return [coerce_row(row) for row in csv.DictReader(io.StringIO(text, newline=""))]
    except (csv.Error, ValueError) as exc:
        raise LmcError(f"cannot read {path} ({exc}); re-run `lmc sweep` to rewrite it") from exc


def is_close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9


def method_sort_key(method: str) -> tuple[int, str]:
    return (METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER), method)


def mean_std(values: Iterable[float]) -> tuple[float, float, int]:
    """Mean and sample std (ddof=1) of the finite values. With one value the std is 0 when it
    was the only one (a single pair) and NaN when others were undefined (no spread is known)."""
    values = list(values)
    finite = np.array([v for v in values if math.isfinite(v)], dtype=np.float64)
    if finite.size == 0:
        return math.nan, math.nan, 0
    if finite.size > 1:
        std = float(finite.std(ddof=1))
    else:
        std = 0.0 if len(values) == 1 else math.nan
    return float(finite.mean()), std, int(finite.size)
