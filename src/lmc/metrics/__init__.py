"""Metrics along a path between two models: evaluation in few passes, barriers, calibration,
ensembles and the random-direction baseline.

Path convention (docs/science.md): theta(lam) = (1 - lam) * theta_A + lam * theta_B; lam = 0 is A.
Accuracies are fractions in [0, 1]; losses are mean cross-entropies in nats.

- :func:`evaluate_path` (options: :class:`PathSettings`) -> :class:`PathResult` (the
  per-lambda numbers :data:`PER_LAMBDA_KEYS`: loss, accuracy, logit norm, ensemble, calibrated
  loss and inverse temperature; which subset each uses is in :mod:`lmc.metrics.result`).
- The engines that compute the logits along the path (:mod:`lmc.metrics.engine`:
  :func:`select_engine`, :func:`auto_batch_size`; the chain fast path :mod:`lmc.metrics.chain`).
- :func:`barriers` and the pure barrier functions of :mod:`lmc.metrics.barriers`; the barrier
  schema :data:`BARRIERS` (:class:`Barrier`: key, curve, function, meaning) and its keys
  :data:`BARRIER_KEYS`, the one list of barrier keys every results file uses.
- :func:`fit_inverse_temperature` (and :func:`fit_inverse_temperatures` on several subsets of
  the same predictions), :func:`cross_entropy_at`; the calibrations
  (:data:`CALIBRATIONS`: the paper's 20/80 ``split``, the cross-fitted ``crossfit`` and ``auto``,
  :func:`resolve_calibration`) and their subsets (:func:`calibration_split`,
  :func:`crossfit_folds`); :data:`CALIBRATE_DEFAULTS`: whether a path is calibrated when
  nobody says, the one statement of that default for every entry point.
- :func:`random_direction_state`: the flatness control.
- :func:`expected_calibration_error`, :func:`reliability_curve` (:class:`ReliabilityCurve`)
  and :func:`draw_reliability_diagram`: ECE over equal-width confidence bins
  (:mod:`lmc.metrics.ece`); :func:`classification_metrics`: loss, accuracy and ECE of logits.
"""

from .barriers import (
    BARRIER_BY_KEY,
    BARRIER_KEYS,
    BARRIERS,
    Barrier,
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
    AUTO_MIN_CALIBRATION,
    BETA_MAX,
    BETA_MIN,
    CALIBRATIONS,
    at_bound,
    calibration_split,
    cross_entropy_at,
    cross_entropy_rows,
    crossfit_folds,
    fit_inverse_temperature,
    fit_inverse_temperatures,
    mean_cross_entropy,
    resolve_calibration,
)
from .chain import chain_forward, chain_plan
from .curve_path import evaluate_curve
from .ece import (
    ReliabilityCurve,
    classification_metrics,
    draw_reliability_diagram,
    expected_calibration_error,
    reliability_curve,
)
from .engine import (
    ENGINES,
    METHODS,
    BatchedEngine,
    LoopEngine,
    auto_batch_size,
    model_logits,
    select_engine,
    stacked_logits,
)
from .path import evaluate_path
from .result import PER_LAMBDA_KEYS, PathResult
from .settings import CALIBRATE_DEFAULTS, PathSettings, lambda_grid

__all__ = [
    "AUTO_MIN_CALIBRATION",
    "BARRIERS",
    "BARRIER_BY_KEY",
    "BARRIER_KEYS",
    "BETA_MAX",
    "BETA_MIN",
    "CALIBRATE_DEFAULTS",
    "CALIBRATIONS",
    "ENGINES",
    "METHODS",
    "PER_LAMBDA_KEYS",
    "Barrier",
    "BatchedEngine",
    "LoopEngine",
    "PathResult",
    "PathSettings",
    "ReliabilityCurve",
    "classification_metrics",
    "accuracy_barrier",
    "at_bound",
    "auto_batch_size",
    "barriers",
    "calibrated_loss_barrier",
    "calibrated_max_minus_mean_loss",
    "calibrated_midpoint_loss_barrier",
    "calibration_split",
    "chain_forward",
    "chain_plan",
    "cross_entropy_at",
    "cross_entropy_rows",
    "crossfit_folds",
    "draw_reliability_diagram",
    "evaluate_curve",
    "evaluate_path",
    "expected_calibration_error",
    "fit_inverse_temperature",
    "fit_inverse_temperatures",
    "lambda_grid",
    "loss_barrier",
    "max_minus_mean_loss",
    "mean_cross_entropy",
    "mean_minus_min_accuracy",
    "midpoint_accuracy_barrier",
    "midpoint_loss_barrier",
    "model_logits",
    "moved_entries",
    "random_direction_state",
    "reliability_curve",
    "resolve_calibration",
    "select_engine",
    "stacked_logits",
]
