"""Barriers along a path, exactly as SCIENCE.md defines them.

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
too); see :mod:`lmc.metrics.result` for which subset each number uses. A calibrated loss that
is undefined (NaN: its beta hit the bound of the search) makes every calibrated barrier that
uses it NaN: it is never replaced by a number.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lmc.config import LmcError

_TOL = 1e-9

BARRIER_KEYS = (
    "loss_barrier",
    "midpoint_loss_barrier",
    "max_minus_mean_loss",
    "accuracy_barrier",
    "midpoint_accuracy_barrier",
    "mean_minus_min_accuracy",
    "calibrated_loss_barrier",
    "calibrated_midpoint_loss_barrier",
    "calibrated_max_minus_mean_loss",
)


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


def barriers(result: Any) -> dict[str, float | None]:
    """Every barrier of a :class:`lmc.metrics.PathResult` (or any object/dict with ``lambdas``,
    ``loss``, ``accuracy`` and optionally ``calibrated_loss``), keyed as in
    :data:`BARRIER_KEYS`. Calibrated keys are ``None`` when the path was not calibrated.

    ``loss``/``accuracy`` barriers use the full split; calibrated ones the scored examples
    (the held-out subset with the ``split`` calibration, every example with ``crossfit``).
    Two more keys compare like with like: ``heldout_loss_barrier`` and
    ``heldout_midpoint_loss_barrier`` are the uncalibrated barriers on those same examples
    (``None`` unless calibrated).
    """

    def get(name: str) -> Any:
        return result.get(name) if isinstance(result, dict) else getattr(result, name, None)

    lam, loss, acc = get("lambdas"), get("loss"), get("accuracy")
    cal, held = get("calibrated_loss"), get("heldout_loss")
    out: dict[str, float | None] = {
        "loss_barrier": loss_barrier(lam, loss),
        "midpoint_loss_barrier": midpoint_loss_barrier(lam, loss),
        "max_minus_mean_loss": max_minus_mean_loss(lam, loss),
        "accuracy_barrier": accuracy_barrier(lam, acc),
        "midpoint_accuracy_barrier": midpoint_accuracy_barrier(lam, acc),
        "mean_minus_min_accuracy": mean_minus_min_accuracy(lam, acc),
        "calibrated_loss_barrier": None,
        "calibrated_midpoint_loss_barrier": None,
        "calibrated_max_minus_mean_loss": None,
        "heldout_loss_barrier": None,
        "heldout_midpoint_loss_barrier": None,
    }
    if cal is not None:
        out["calibrated_loss_barrier"] = calibrated_loss_barrier(lam, cal)
        out["calibrated_midpoint_loss_barrier"] = calibrated_midpoint_loss_barrier(lam, cal)
        out["calibrated_max_minus_mean_loss"] = calibrated_max_minus_mean_loss(lam, cal)
    if held is not None:
        out["heldout_loss_barrier"] = loss_barrier(lam, held)
        out["heldout_midpoint_loss_barrier"] = midpoint_loss_barrier(lam, held)
    return out
