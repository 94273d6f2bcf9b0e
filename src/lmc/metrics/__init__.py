"""Metrics along a path between two models: evaluation in few passes, barriers, calibration,
ensembles and the random-direction baseline.

Path convention (SCIENCE.md): theta(lam) = (1 - lam) * theta_A + lam * theta_B; lam = 0 is A.
Accuracies are fractions in [0, 1]; losses are mean cross-entropies in nats.

- :func:`evaluate_path` -> :class:`PathResult` (per-lambda loss, accuracy, logit norm,
  ensemble, calibrated loss and inverse temperature; which subset each uses is in
  :mod:`lmc.metrics.path`).
- :func:`barriers` and the pure barrier functions of :mod:`lmc.metrics.barriers`.
- :func:`fit_inverse_temperature`, :func:`cross_entropy_at`.
- :func:`random_direction_state`: the flatness control.
"""

from .barriers import (
    BARRIER_KEYS,
    accuracy_barrier,
    barriers,
    calibrated_loss_barrier,
    calibrated_max_minus_mean_loss,
    calibrated_midpoint_loss_barrier,
    loss_barrier,
    max_minus_mean_loss,
    mean_minus_min_accuracy,
    midpoint_accuracy_barrier,
    midpoint_loss_barrier,
)
from .baselines import moved_entries, random_direction_state
from .calibration import (
    BETA_MAX,
    BETA_MIN,
    cross_entropy_at,
    fit_inverse_temperature,
    mean_cross_entropy,
)
from .path import (
    METHODS,
    PathResult,
    calibration_split,
    chain_plan,
    evaluate_path,
    lambda_grid,
)

__all__ = [
    "BARRIER_KEYS",
    "BETA_MAX",
    "BETA_MIN",
    "METHODS",
    "PathResult",
    "accuracy_barrier",
    "barriers",
    "calibrated_loss_barrier",
    "calibrated_max_minus_mean_loss",
    "calibrated_midpoint_loss_barrier",
    "calibration_split",
    "chain_plan",
    "cross_entropy_at",
    "evaluate_path",
    "fit_inverse_temperature",
    "lambda_grid",
    "loss_barrier",
    "max_minus_mean_loss",
    "mean_cross_entropy",
    "mean_minus_min_accuracy",
    "midpoint_accuracy_barrier",
    "midpoint_loss_barrier",
    "moved_entries",
    "random_direction_state",
]
