"""Barriers along a path, exactly as docs/science.md § Barriers defines them.

Every function takes the λ grid and the metric's values on it (any order; sorted here) and
returns a float. λ = 0 is model A, λ = 1 is model B; both endpoints must be on the grid. The
midpoint versions need λ = ½ on the grid (:func:`lmc.metrics.lambda_grid` always adds it).

Losses (nats):
- ``loss_barrier``         max_λ [L(λ) − ((1 − λ)L_0 + λL_1)]        (≥ 0: endpoints give 0)
- ``midpoint_loss_barrier``   L(½) − ½(L_0 + L_1)                   (may be negative)
- ``max_minus_mean_loss``  max_λ L(λ) − ½(L_0 + L_1)                (Git Re-Basin's plot; ≥ 0)

Accuracies (fractions in [0, 1]) with the sign reversed, so a drop is a positive barrier:
- ``accuracy_barrier``           max_λ [((1 − λ)A_0 + λA_1) − A(λ)]   (≥ 0)
- ``midpoint_accuracy_barrier``  ½(A_0 + A_1) − A(½)                 (may be negative)
- ``mean_minus_min_accuracy``    ½(A_0 + A_1) − min_λ A(λ)           (the sign-reversed
  ``max_minus_mean_loss``)

The calibrated versions apply the loss formulas to calibrated losses (endpoints calibrated
too); see :mod:`lmc.metrics.result` for which subset each number uses; the ``heldout_*``
versions apply them to the uncalibrated losses on those same examples. A calibrated loss that
is undefined (NaN: its beta hit the bound of the search) makes every calibrated barrier that
uses it NaN: it is never replaced by a number.

The schema: :data:`BARRIERS` lists every barrier :func:`barriers` returns (its key, the
per-λ curve it is computed from, the function and its meaning), in order; :data:`BARRIER_KEYS`
are their keys. It is the one list of barrier keys: results files (a width study's
``results.csv``, an onset study's CSVs), Table 1 and the report import it.

Paths other than the line: a curve θ(t) between A and B (:mod:`lmc.merge.curves`: ``bezier``,
``chain``) has the same barriers with t in λ's place (docs/science.md, "Curves between two
models"): the chord is still (1 − t)L_0 + tL_1. A results row or record names its path's kind
in :data:`PATH_KEY` (``path``); one without it (written before curves existed) is the line
(:func:`path_kind_of`), so line and curve rows sit side by side in one table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lmc.config import LmcError

_TOL = 1e-9

#: The key (and results column) naming a path's kind: ``line``, ``bezier``, ``chain``
#: (:data:`lmc.merge.curves.PATH_KINDS`).
PATH_KEY = "path"
#: The kind of a path whose record names none (written before curves existed).
DEFAULT_PATH = "line"


def path_kind_of(record: Any) -> str:
    """The path kind of a results row, a job's path record or a
    :class:`lmc.metrics.PathResult`: its :data:`PATH_KEY` entry, or :data:`DEFAULT_PATH`
    (``line``) when it has none (absent, ``None``, empty or NaN: a record written before
    curves existed)."""
    value = record.get(PATH_KEY) if isinstance(record, dict) else getattr(record, PATH_KEY, None)
    if value is None or (isinstance(value, float) and value != value):
        return DEFAULT_PATH
    text = str(value).strip()
    return text if text and text.lower() != "nan" else DEFAULT_PATH


def _curve(lambdas: Sequence[float], values: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    lam = np.asarray(lambdas, dtype=np.float64).reshape(-1)
    val = np.asarray(values, dtype=np.float64).reshape(-1)
    if lam.shape != val.shape:
        raise LmcError(f"{len(lam)} lambdas but {len(val)} values: give one value per lambda")
    order = np.argsort(lam, kind="stable")
    lam, val = lam[order], val[order]
    if lam.size == 0 or abs(lam[0]) > _TOL or abs(lam[-1] - 1.0) > _TOL:
        raise LmcError("a barrier needs both endpoints on the grid: include lambda = 0 and 1")
    return lam, val


def _endpoints(lam: np.ndarray, val: np.ndarray) -> tuple[float, float]:
    return float(val[0]), float(val[-1])


def _at_half(lam: np.ndarray, val: np.ndarray) -> float:
    hit = np.flatnonzero(np.abs(lam - 0.5) <= _TOL)
    if hit.size == 0:
        raise LmcError("a midpoint barrier needs lambda = 0.5 on the grid")
    return float(val[hit[0]])


def loss_barrier(lambdas: Sequence[float], losses: Sequence[float]) -> float:
    """max_λ [L(λ) − ((1 − λ)L_0 + λL_1)] over the grid (Frankle et al.); ≥ 0."""
    lam, val = _curve(lambdas, losses)
    l0, l1 = _endpoints(lam, val)
    return float(np.max(val - ((1.0 - lam) * l0 + lam * l1)))


def midpoint_loss_barrier(lambdas: Sequence[float], losses: Sequence[float]) -> float:
    """L(½) − ½(L_0 + L_1) (the width paper's Table 1); may be negative."""
    lam, val = _curve(lambdas, losses)
    l0, l1 = _endpoints(lam, val)
    return _at_half(lam, val) - 0.5 * (l0 + l1)


def max_minus_mean_loss(lambdas: Sequence[float], losses: Sequence[float]) -> float:
    """max_λ L(λ) − ½(L_0 + L_1) (Git Re-Basin's barrier); ≥ 0."""
    lam, val = _curve(lambdas, losses)
    l0, l1 = _endpoints(lam, val)
    return float(np.max(val)) - 0.5 * (l0 + l1)


def accuracy_barrier(lambdas: Sequence[float], accuracies: Sequence[float]) -> float:
    """max_λ [((1 − λ)A_0 + λA_1) − A(λ)]: the largest drop below the chord; ≥ 0."""
    lam, val = _curve(lambdas, accuracies)
    a0, a1 = _endpoints(lam, val)
    return float(np.max(((1.0 - lam) * a0 + lam * a1) - val))


def midpoint_accuracy_barrier(lambdas: Sequence[float], accuracies: Sequence[float]) -> float:
    """½(A_0 + A_1) − A(½); positive when the midpoint is less accurate; may be negative."""
    lam, val = _curve(lambdas, accuracies)
    a0, a1 = _endpoints(lam, val)
    return 0.5 * (a0 + a1) - _at_half(lam, val)


def mean_minus_min_accuracy(lambdas: Sequence[float], accuracies: Sequence[float]) -> float:
    """½(A_0 + A_1) − min_λ A(λ): ``max_minus_mean_loss`` for accuracy, sign reversed; ≥ 0."""
    lam, val = _curve(lambdas, accuracies)
    a0, a1 = _endpoints(lam, val)
    return 0.5 * (a0 + a1) - float(np.min(val))


def calibrated_loss_barrier(lambdas: Sequence[float], calibrated_losses: Sequence[float]) -> float:
    """:func:`loss_barrier` of calibrated losses."""
    return loss_barrier(lambdas, calibrated_losses)


def calibrated_midpoint_loss_barrier(
    lambdas: Sequence[float], calibrated_losses: Sequence[float]
) -> float:
    """:func:`midpoint_loss_barrier` of calibrated losses (the width paper's Table 1 number)."""
    return midpoint_loss_barrier(lambdas, calibrated_losses)


def calibrated_max_minus_mean_loss(
    lambdas: Sequence[float], calibrated_losses: Sequence[float]
) -> float:
    """:func:`max_minus_mean_loss` of calibrated losses."""
    return max_minus_mean_loss(lambdas, calibrated_losses)


@dataclass(frozen=True)
class Barrier:
    """One barrier of the schema: ``key`` (its name in every results file), ``curve`` (the
    per-λ key of :class:`lmc.metrics.PathResult` and column of ``results.csv`` it is computed
    from: ``loss``, ``accuracy``, ``calibrated_loss`` or ``heldout_loss``), ``function``
    (``function(lambdas, values) -> float``) and ``meaning`` (its formula, unit and sign)."""

    key: str
    curve: str
    function: Callable[[Sequence[float], Sequence[float]], float]
    meaning: str

    def of(self, lambdas: Sequence[float], values: Sequence[float] | None) -> float | None:
        """The barrier of ``values`` on ``lambdas``; ``None`` when the curve is absent."""
        return None if values is None else self.function(lambdas, values)


#: Curves every path has; the others (accuracy: only a task with an accuracy; calibrated,
#: held-out: only a calibrated path) may be absent, and their barriers are then ``None``.
REQUIRED_CURVES = ("loss",)

#: Every barrier, in the order of the results files' columns (docs/science.md § Barriers).
BARRIERS: tuple[Barrier, ...] = (
    Barrier(
        "loss_barrier",
        "loss",
        loss_barrier,
        "max_λ [L(λ) − ((1 − λ)L_0 + λL_1)], nats; ≥ 0 (Frankle et al.)",
    ),
    Barrier(
        "midpoint_loss_barrier",
        "loss",
        midpoint_loss_barrier,
        "L(½) − ½(L_0 + L_1), nats; may be negative (the width paper's Table 1)",
    ),
    Barrier(
        "max_minus_mean_loss",
        "loss",
        max_minus_mean_loss,
        "max_λ L(λ) − ½(L_0 + L_1), nats; ≥ 0 (Git Re-Basin's barrier)",
    ),
    Barrier(
        "accuracy_barrier",
        "accuracy",
        accuracy_barrier,
        "max_λ [((1 − λ)A_0 + λA_1) − A(λ)], a fraction; ≥ 0",
    ),
    Barrier(
        "midpoint_accuracy_barrier",
        "accuracy",
        midpoint_accuracy_barrier,
        "½(A_0 + A_1) − A(½), a fraction; may be negative",
    ),
    Barrier(
        "mean_minus_min_accuracy",
        "accuracy",
        mean_minus_min_accuracy,
        "½(A_0 + A_1) − min_λ A(λ), a fraction; ≥ 0 (max_minus_mean_loss for accuracy)",
    ),
    Barrier(
        "calibrated_loss_barrier",
        "calibrated_loss",
        calibrated_loss_barrier,
        "loss_barrier of the calibrated losses, nats; ≥ 0",
    ),
    Barrier(
        "calibrated_midpoint_loss_barrier",
        "calibrated_loss",
        calibrated_midpoint_loss_barrier,
        "midpoint_loss_barrier of the calibrated losses, nats (the width paper's Table 1 number)",
    ),
    Barrier(
        "calibrated_max_minus_mean_loss",
        "calibrated_loss",
        calibrated_max_minus_mean_loss,
        "max_minus_mean_loss of the calibrated losses, nats; ≥ 0",
    ),
    Barrier(
        "heldout_loss_barrier",
        "heldout_loss",
        loss_barrier,
        "loss_barrier of the uncalibrated losses on the calibrated ones' examples, nats",
    ),
    Barrier(
        "heldout_midpoint_loss_barrier",
        "heldout_loss",
        midpoint_loss_barrier,
        "midpoint_loss_barrier of the uncalibrated losses on the calibrated ones' examples, nats",
    ),
)
#: The keys of :data:`BARRIERS`, in order: every key :func:`barriers` returns.
BARRIER_KEYS: tuple[str, ...] = tuple(b.key for b in BARRIERS)
#: Key -> :class:`Barrier`.
BARRIER_BY_KEY: dict[str, Barrier] = {b.key: b for b in BARRIERS}


def barriers(result: Any) -> dict[str, float | None]:
    """Every barrier of :data:`BARRIERS` of a :class:`lmc.metrics.PathResult` (or any
    object/dict with ``lambdas``, ``loss``, ``accuracy`` and optionally ``calibrated_loss`` and
    ``heldout_loss``), keyed as in :data:`BARRIER_KEYS` and in that order.

    ``loss``/``accuracy`` barriers use the full split; calibrated ones the scored examples
    (the held-out subset with the ``split`` calibration, every example with ``crossfit``).
    ``heldout_loss_barrier`` and ``heldout_midpoint_loss_barrier`` compare like with like: the
    uncalibrated barriers on those same examples. A barrier whose curve is absent (the
    accuracy ones of a task without an accuracy, such as a regression; the calibrated and
    held-out ones of a path that was not calibrated) is ``None``; a result without ``loss``
    is an ``LmcError``.
    """

    def get(name: str) -> Any:
        return result.get(name) if isinstance(result, dict) else getattr(result, name, None)

    lam = get("lambdas")
    for curve in REQUIRED_CURVES:
        if get(curve) is None:
            raise LmcError(f"barriers need the path's {curve!r} values; the result has none")
    return {b.key: b.of(lam, get(b.curve)) for b in BARRIERS}
