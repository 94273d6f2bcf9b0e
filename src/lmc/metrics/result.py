"""The per-lambda numbers of a path: their names, how they are computed from logits, and the
:class:`PathResult` that holds them.

Path: theta(lam) = (1 - lam) * theta_A + lam * theta_B; lam = 0 is A. Every number is float64;
losses are mean cross-entropies in nats, accuracies fractions in [0, 1]. Per lambda (the
examples used in parentheses; the subsets are :func:`lmc.metrics.calibration_split`'s):

- ``loss``: mean cross-entropy of theta(lam) (full split)
- ``accuracy``: fraction of correct argmax predictions (full split)
- ``calibrated_loss``: cross-entropy of softmax(beta * logits) (held-out subset); NaN when beta
  is on a bound of its search (:func:`lmc.metrics.calibration.at_bound`)
- ``inverse_temperature``: beta fitted on the calibration subset
- ``ensemble_loss`` / ``ensemble_accuracy``: of the logits (1 - lam) f_A + lam f_B (full split)
- ``logit_norm``: mean over examples of the L2 norm of the logits (full split)
- ``heldout_loss``: uncalibrated cross-entropy (beta = 1) (held-out subset)
- ``ensemble_calibrated_loss`` / ``ensemble_inverse_temperature``: the same for the ensemble.

The calibrated ones (and ``heldout_loss``) exist only when the path was calibrated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from .barriers import barriers as _barriers
from .calibration import (
    at_bound,
    calibration_split,
    cross_entropy_rows,
    fit_inverse_temperature,
    mean_cross_entropy,
)

#: The per-lambda metrics of a path, in the order files and tables list them (module doc).
PER_LAMBDA_KEYS = (
    "loss",
    "accuracy",
    "calibrated_loss",
    "inverse_temperature",
    "ensemble_loss",
    "ensemble_accuracy",
    "logit_norm",
    "heldout_loss",
    "ensemble_calibrated_loss",
    "ensemble_inverse_temperature",
)


def _fit(z: torch.Tensor, y: torch.Tensor) -> float:
    if not torch.isfinite(z).all():
        return math.nan
    return fit_inverse_temperature(z, y)


class LambdaMetrics:
    """Turns a stack of models' logits on the split into their per-lambda numbers.

    ``y``: the split's (N,) int64 labels on the logits' device; with ``calibrate`` the split is
    divided by :func:`lmc.metrics.calibration_split` ``(N, seed, fraction)`` (``cal``/``held``
    index tensors). Everything but the beta searches is computed for the whole stack at once
    (a handful of kernels per chunk of lambdas, not per lambda), and each example's
    cross-entropy is computed once: the held-out loss is a subset mean of the same rows.
    """

    def __init__(self, y: torch.Tensor, calibrate: bool, seed: int, fraction: float) -> None:
        self.y = y
        self.calibrate, self.seed, self.fraction = calibrate, seed, fraction
        if calibrate:
            cal, held = calibration_split(len(y), seed, fraction)
            self.cal, self.held = cal.to(y.device), held.to(y.device)
            self.y_cal, self.y_held = y[self.cal], y[self.held]

    def description(self) -> dict[str, Any]:
        """The :class:`PathResult` fields that describe the split and its calibration subsets
        (``num_examples``, ``calibrate``, ``calibration_seed``, ``calibration_fraction``,
        ``num_calibration``, ``num_heldout``; the calibration ones ``None`` when not calibrating).
        """
        cal = self.calibrate
        return {
            "num_examples": len(self.y),
            "calibrate": cal,
            "calibration_seed": self.seed if cal else None,
            "calibration_fraction": self.fraction if cal else None,
            "num_calibration": len(self.cal) if cal else None,
            "num_heldout": len(self.held) if cal else None,
        }

    def _calibrate(self, z: torch.Tensor) -> tuple[list[float], list[float]]:
        """Per model of the stack: beta on the calibration subset, calibrated held-out loss.

        A beta on a bound of the search (:func:`at_bound`: the loss has no minimum inside,
        e.g. a perfectly classified calibration subset, where beta -> infinity) leaves the
        calibrated loss undefined: it is NaN, not the loss at the arbitrary bound.
        """
        betas = [_fit(z[k, self.cal], self.y_cal) for k in range(z.shape[0])]
        finite = torch.tensor([0.0 if math.isnan(b) else b for b in betas], dtype=torch.float64)
        scaled = z[:, self.held].double() * finite.to(z.device).view(-1, 1, 1)
        losses = mean_cross_entropy(scaled, self.y_held).tolist()
        return betas, [math.nan if at_bound(b) else v for b, v in zip(betas, losses)]

    def __call__(
        self, lams: list[float], z: torch.Tensor, z_a: torch.Tensor, z_b: torch.Tensor
    ) -> list[dict[str, float]]:
        """One dict per lambda of ``lams``, keyed by :data:`PER_LAMBDA_KEYS` (the calibrated
        keys only when calibrating); ``z``: (k, N, C) logits of theta(lam) for those lambdas,
        ``z_a``, ``z_b``: (N, C) logits of the endpoints (for the ensemble)."""
        y = self.y
        lam = torch.tensor(lams, dtype=z_a.dtype, device=z_a.device).view(-1, 1, 1)
        z_ens = (1.0 - lam) * z_a + lam * z_b
        ce = cross_entropy_rows(z, y)
        cols: dict[str, list[float]] = {
            "loss": ce.mean(dim=1).tolist(),
            "accuracy": (z.argmax(2) == y).double().mean(dim=1).tolist(),
            "logit_norm": torch.linalg.vector_norm(z.double(), dim=2).mean(dim=1).tolist(),
            "ensemble_loss": cross_entropy_rows(z_ens, y).mean(dim=1).tolist(),
            "ensemble_accuracy": (z_ens.argmax(2) == y).double().mean(dim=1).tolist(),
        }
        if self.calibrate:
            cols["heldout_loss"] = ce[:, self.held].mean(dim=1).tolist()
            cols["inverse_temperature"], cols["calibrated_loss"] = self._calibrate(z)
            (
                cols["ensemble_inverse_temperature"],
                cols["ensemble_calibrated_loss"],
            ) = self._calibrate(z_ens)
        return [{key: values[k] for key, values in cols.items()} for k in range(len(lams))]


@dataclass
class PathResult:
    """Metrics along the path theta(lam); lists have one entry per lambda.

    The per-lambda fields are :data:`PER_LAMBDA_KEYS` (module doc; the calibrated ones ``None``
    when the path was not calibrated); the rest describe how the path was evaluated
    (:func:`lmc.metrics.evaluate_path`). ``calibration_at_bound`` /
    ``ensemble_calibration_at_bound`` list the lambdas whose beta is on a bound of its search
    (their calibrated loss is NaN).
    """

    lambdas: list[float]
    loss: list[float]
    accuracy: list[float]
    logit_norm: list[float]
    ensemble_loss: list[float]
    ensemble_accuracy: list[float]
    inverse_temperature: list[float] | None = None
    calibrated_loss: list[float] | None = None
    heldout_loss: list[float] | None = None
    ensemble_inverse_temperature: list[float] | None = None
    ensemble_calibrated_loss: list[float] | None = None
    bn: str = "none"
    method: str = "loop"
    calibrate: bool = False
    calibration_seed: int | None = None
    calibration_fraction: float | None = None
    num_examples: int = 0
    num_calibration: int | None = None
    num_heldout: int | None = None
    added_lambdas: list[float] = field(default_factory=list)
    calibration_at_bound: list[float] = field(default_factory=list)
    ensemble_calibration_at_bound: list[float] = field(default_factory=list)

    @classmethod
    def from_rows(
        cls, lambdas: Sequence[float], rows: Sequence[Mapping[str, float]], **info: Any
    ) -> PathResult:
        """A result from one dict per lambda (as :class:`LambdaMetrics` gives them): each key
        of :data:`PER_LAMBDA_KEYS` becomes a column (``None`` when the rows lack it), the
        at-bound lists are derived from the inverse temperatures, ``info`` fills the rest."""
        columns = {
            key: [row[key] for row in rows] if key in rows[0] else None for key in PER_LAMBDA_KEYS
        }

        def bound(key: str) -> list[float]:
            return [lam for lam, b in zip(lambdas, columns[key] or []) if at_bound(b)]

        return cls(
            lambdas=list(lambdas),
            **columns,
            calibration_at_bound=bound("inverse_temperature"),
            ensemble_calibration_at_bound=bound("ensemble_inverse_temperature"),
            **info,
        )

    def barriers(self) -> dict[str, float | None]:
        """All barriers (:func:`lmc.metrics.barriers`)."""
        return _barriers(self)

    def to_dict(self) -> dict[str, Any]:
        """Every field, as plain lists and numbers (JSON-ready but for NaN)."""
        return asdict(self)

    def curves(self) -> dict[str, list[float] | None]:
        """``lambdas`` and every per-lambda metric (:data:`PER_LAMBDA_KEYS`), as lists."""
        return {"lambdas": self.lambdas, **{key: getattr(self, key) for key in PER_LAMBDA_KEYS}}

    def rows(self) -> list[dict[str, float | None]]:
        """One dict per lambda: ``lambda`` and every per-lambda metric (``None`` when not
        computed), keyed and ordered as :data:`PER_LAMBDA_KEYS`."""
        columns = {key: getattr(self, key) for key in PER_LAMBDA_KEYS}
        return [
            {"lambda": lam, **{k: None if v is None else v[i] for k, v in columns.items()}}
            for i, lam in enumerate(self.lambdas)
        ]

    def calibration_warning(self) -> str | None:
        """What :func:`lmc.metrics.evaluate_path` warns about when the calibration hit its
        bound (which lambdas, the calibration subset's size, that the calibrated loss is
        undefined there), or ``None`` when it did not."""
        if not (self.calibration_at_bound or self.ensemble_calibration_at_bound):
            return None

        def lams(values: list[float]) -> str:
            return "λ = " + ", ".join(f"{v:g}" for v in values) if values else "no λ"

        return (
            f"calibration hit the bound of its search at {lams(self.calibration_at_bound)} "
            f"(ensemble: {lams(self.ensemble_calibration_at_bound)}) on the "
            f"{self.num_calibration}-example calibration subset: the inverse temperature is not "
            "identifiable there (e.g. the subset is perfectly classified, beta -> infinity), so "
            "the calibrated loss is undefined there (NaN) and so is every calibrated barrier "
            "using it; use a larger split or calibration_fraction"
        )
