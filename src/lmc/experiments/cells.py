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
from lmc.perm.methods import all_methods

# Columns kept as text; every other column is parsed as a number.
TEXT_COLUMNS = frozenset(
    {"dataset", "model", "method", "path", "split", "bn", "name", "kind", "variant", "set"}
)
INT_COLUMNS = frozenset({"pair", "layer", "pairs"})
REQUIRED_RESULT_COLUMNS = ("width", "weight_decay", "pair", "method", "lam")


def method_order() -> tuple[str, ...]:
    """The order of merge methods in figures and tables: every registered alignment method that
    gives its place (``AlignmentMethod.order``, :mod:`lmc.perm.methods`), lowest first (ties in
    registration order); other methods follow them, sorted by name (:func:`method_sort_key`)."""
    ordered = sorted((m for m in all_methods() if m.order is not None), key=lambda m: m.order)
    return tuple(m.name for m in ordered)


def __getattr__(name: str) -> Any:
    # ``METHOD_ORDER``: :func:`method_order`, read from the records at each access, so that a
    # method registered after this module was imported takes its place
    if name == "METHOD_ORDER":
        return method_order()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    """Where ``method`` goes in figures and tables (:func:`method_order`; unknown names last,
    by name)."""
    order = method_order()
    return (order.index(method) if method in order else len(order), method)


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
