"""Softmax temperature calibration (the width paper, section 3.1).

One inverse temperature beta > 0 per model minimises the mean cross-entropy of
softmax(beta * logits) on a calibration subset; the calibrated loss is the cross-entropy at that
beta on the rest of the split. beta changes no prediction, so accuracy is unchanged.

Two ways to split the examples (:data:`CALIBRATIONS`; ``auto`` picks one by
:func:`resolve_calibration`):

- ``split`` (the paper's): beta is fitted on a fixed random ``fraction`` (20%) of the split,
  the calibration subset of :func:`calibration_split`, and the loss is scored on the other 80%.
- ``crossfit`` (stable on small splits): the split is cut into K random folds
  (:func:`crossfit_folds`); for each fold beta is fitted on the other K - 1 folds and scored on
  that fold, so every example is scored exactly once, by a beta that never saw it. The
  calibrated loss is the mean of those held-out losses over all N examples.
- ``auto``: ``crossfit`` when the split's calibration subset would hold fewer than
  :data:`AUTO_MIN_CALIBRATION` (1000) examples, i.e. below 5000 examples at the default 20%
  (digits' 451 test examples), ``split`` otherwise (MNIST's and CIFAR's 10000).

A fitted beta on a bound of the search (:func:`at_bound`) means the loss has no minimum inside
the bounds (e.g. a perfectly classified subset, beta -> infinity): that beta is not a number
that can be reported or averaged, and the calibrated loss that uses it is undefined.

Tasks (:mod:`lmc.data.tasks`): the subsets and folds are drawn over *examples* (whole windows
for ``next-token``, never parts of one; :meth:`lmc.data.tasks.Task.rows` maps them to
predictions), and one beta is fitted over all the predictions of its examples (every
position's logits). :func:`fit_inverse_temperature` and :func:`cross_entropy_at` take the
task's layout with ``task=`` (default ``classification``: (N, C) logits, (N,) labels).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from lmc.config import LmcError
from lmc.data.tasks import CLASSIFICATION, Task, get_task

#: Bounds of the search, on beta (the search itself runs on log beta).
BETA_MIN = 1e-3
#: The upper bound of the search on beta (a fit at it is reported as at the bound).
BETA_MAX = 1e4
#: Tolerance of the search on log(beta): beta is found to a relative 1e-7 or better.
LOG_BETA_TOL = 1e-7
#: The calibration methods (module doc); ``auto`` resolves to one of the other two.
CALIBRATIONS = ("auto", "split", "crossfit")
#: ``auto`` cross-fits when the calibration subset would hold fewer examples than this.
AUTO_MIN_CALIBRATION = 1000


def _check(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if logits.dim() != 2:
        raise LmcError(f"logits must have shape (N, classes), got {tuple(logits.shape)}")
    if labels.shape != (logits.shape[0],):
        raise LmcError(
            f"labels must have shape ({logits.shape[0]},) to match the logits, "
            f"got {tuple(labels.shape)}"
        )
    if logits.shape[0] == 0:
        raise LmcError("calibration needs at least one example")
    return logits.detach(), labels.detach().to(device=logits.device, dtype=torch.int64)


def cross_entropy_rows(
    logits: torch.Tensor, labels: torch.Tensor, beta: float = 1.0
) -> torch.Tensor:
    """Per-example cross-entropy (nats) of softmax(beta * logits) for a stack of models.

    ``logits``: (k, N, C), one slice per model; ``labels``: (N,) class indices on the logits'
    device. Returns a (k, N) float64 tensor: ``logsumexp_j(beta * z_kij) - beta * z_ki,label_i``
    (the classification task's :meth:`lmc.data.tasks.Task.stack_losses`). One set of kernels
    for the whole stack (no per-model launches); the one cross-entropy
    :func:`mean_cross_entropy` and :func:`cross_entropy_at` share (a subset mean of its rows is
    that subset's loss).
    """
    return CLASSIFICATION.stack_losses(logits, labels, beta)


def mean_cross_entropy(
    logits: torch.Tensor, labels: torch.Tensor, beta: float = 1.0
) -> torch.Tensor:
    """Mean cross-entropy (nats) of softmax(beta * logits) for a stack of models, in float64.

    ``logits``: (k, N, C); ``labels``: (N,). Returns a (k,) float64 tensor: the mean over
    examples of :func:`cross_entropy_rows`.
    """
    return cross_entropy_rows(logits, labels, beta).mean(dim=1)


def _flatten(
    logits: torch.Tensor, labels: torch.Tensor, task: Task | str
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits, labels)`` as one row per prediction of ``task`` (classification: as given):
    the task's :meth:`lmc.data.tasks.Task.calibration_layout`; ``LmcError`` when calibration
    has no meaning for the task."""
    task = get_task(task)
    task.require_calibration()
    return task.calibration_layout(logits, labels)


def cross_entropy_at(
    logits: torch.Tensor,
    labels: torch.Tensor,
    beta: float = 1.0,
    *,
    task: Task | str = "classification",
) -> float:
    """Mean cross-entropy (nats) of softmax(beta * logits) against ``labels``, in float64.

    ``logits``: (N, C); ``labels``: (N,) class indices; or the layout of ``task``
    (next-token: (N, T, C) and (N, T), the mean over every position).
    """
    logits, labels = _check(*_flatten(logits, labels, task))
    return mean_cross_entropy(logits[None], labels, beta)[0].item()


def fit_inverse_temperature(
    logits: torch.Tensor, labels: torch.Tensor, *, task: Task | str = "classification"
) -> float:
    """The inverse temperature beta minimising mean cross-entropy of softmax(beta * logits).

    The mean cross-entropy is convex in beta, so its minimum is the one zero of its derivative;
    a safeguarded Newton search finds it (:func:`_solve_beta`: Newton steps on beta kept inside
    a bracket that every step narrows, geometric bisection where a step would leave it), in
    float64, to ``LOG_BETA_TOL`` (``1e-7``) on ``log beta`` or better, within
    ``[BETA_MIN, BETA_MAX] = [1e-3, 1e4]``. The loss and its derivatives are evaluated as
    ``beta * m + log1p(sum_{j != k} exp(beta * (d_j - m)))`` with ``d = logits - logits[label]``,
    ``k`` the row's argmax and ``m = d_k`` (exact even for losses far below float64's epsilon,
    so the search does not stall on a numerically flat loss).

    Degenerate cases: when every example's label is the strict argmax of its logits the loss
    falls for ever as beta grows and ``BETA_MAX`` is returned; when every row of logits is
    constant the loss does not depend on beta and 1.0 is returned. When the optimum lies
    outside the bounds the nearest bound is returned. ``logits``: (N, C) on any device;
    ``labels``: (N,); or the layout of ``task`` (next-token: (N, T, C) and (N, T): one beta
    over every position's logits). Raises ``LmcError`` for non-finite logits.
    """
    return fit_inverse_temperatures(logits, labels, [None], task=task)[0]


def fit_inverse_temperatures(
    logits: torch.Tensor,
    labels: torch.Tensor,
    subsets: Sequence[torch.Tensor | None],
    *,
    task: Task | str = "classification",
) -> list[float]:
    """:func:`fit_inverse_temperature` on each of several subsets of the same predictions.

    ``subsets``: row indices into the task's flattened predictions (one row per prediction;
    classification: the N examples), or ``None`` for all of them. The logits are converted to
    float64 and prepared once, and each search after the first starts from the first subset's
    beta (the folds of a cross-fit lie close to the whole), so K + 1 cross-fitted betas cost
    little more than one. Each beta equals what :func:`fit_inverse_temperature` gives on that
    subset alone, to the search's tolerance.
    """
    logits, labels = _check(*_flatten(logits, labels, task))
    # The search runs in NumPy on the CPU: a few passes of vector operations over the rows,
    # which are faster single-threaded than as (possibly GPU) kernel launches.
    z = logits.detach().to("cpu", torch.float64).numpy()
    y = labels.cpu().numpy()
    if not np.isfinite(z).all():
        raise LmcError("cannot calibrate non-finite logits (the model diverged)")
    rows = np.arange(z.shape[0])
    d = z - z[rows, y][:, None]  # d[i, label_i] = 0
    k = d.argmax(axis=1)  # the argmax does not depend on beta > 0
    m = d[rows, k]  # >= 0
    rest = d - m[:, None]  # <= 0
    del d
    rest[rows, k] = 0.0  # the argmax column: excluded from every sum by _derivatives
    # per row: the label is the strict argmax / the row is constant (the degenerate cases)
    strict = (m == 0) & ((rest < 0).sum(axis=1) == z.shape[1] - 1)
    constant = (z == z[:, :1]).all(axis=1)
    del z
    betas: list[float] = []
    for subset in subsets:
        if subset is None:
            part = (m, rest, k, strict, constant)
        else:
            idx = subset.cpu().numpy()
            if idx.size == 0:
                raise LmcError("calibration needs at least one example")
            part = (m[idx], rest[idx], k[idx], strict[idx], constant[idx])
        start = betas[0] if betas and not at_bound(betas[0]) else 1.0
        betas.append(_solve_beta(*part, start=start))
    return betas


def _derivatives(
    beta: float, m: np.ndarray, rest: np.ndarray, k: np.ndarray
) -> tuple[float, float]:
    """The first and second derivatives in beta of the mean cross-entropy at ``beta``.

    Per row, with ``e_j = exp(beta * rest_j)`` over the non-argmax columns and ``S = sum e``:
    the loss is ``beta * m + log1p(S)``, its derivative ``m + sum(rest * e) / (1 + S)`` and its
    second derivative the variance of ``rest`` under the weights ``e / (1 + S)`` (the argmax
    column holds the remaining ``1 / (1 + S)`` at ``rest = 0``): never negative.
    """
    e = np.exp(beta * rest)
    e[np.arange(len(k)), k] = 0.0
    norm = 1.0 + e.sum(axis=1)
    e *= rest
    first = e.sum(axis=1) / norm
    e *= rest
    second = e.sum(axis=1) / norm - first * first
    return float(np.mean(m + first)), float(np.mean(np.maximum(second, 0.0)))


def _solve_beta(
    m: np.ndarray,
    rest: np.ndarray,
    k: np.ndarray,
    strict: np.ndarray,
    constant: np.ndarray,
    start: float = 1.0,
) -> float:
    """The minimiser in ``[BETA_MIN, BETA_MAX]`` of the mean cross-entropy of prepared rows
    (:func:`fit_inverse_temperatures`), by safeguarded Newton steps from ``start``."""
    if strict.all():
        return BETA_MAX  # every label is the strict argmax: separable, beta -> infinity
    if constant.all():
        return 1.0  # constant logits: the loss does not depend on beta
    lo, hi = BETA_MIN, BETA_MAX  # the minimiser lies in [lo, hi]
    lo_seen = hi_seen = False  # whether the derivative was evaluated at the bound itself
    beta = min(max(float(start), BETA_MIN), BETA_MAX)
    for _ in range(200):
        grad, curvature = _derivatives(beta, m, rest, k)
        if grad == 0.0:
            return beta
        if grad > 0.0:
            hi, hi_seen = beta, True
            if beta <= BETA_MIN:
                return BETA_MIN  # still rising at the lower bound
        else:
            lo, lo_seen = beta, True
            if beta >= BETA_MAX:
                return BETA_MAX  # still falling at the upper bound
        step = beta - grad / curvature if curvature > 0.0 else math.inf
        if not lo < step < hi:
            # a step out of the bracket: try the bound once, then bisect (geometrically)
            if step >= hi and not hi_seen:
                step = hi
            elif step <= lo and not lo_seen:
                step = lo
            else:
                step = math.sqrt(lo * hi)
        if abs(math.log(step / beta)) < LOG_BETA_TOL or math.log(hi / lo) < LOG_BETA_TOL:
            return step
        beta = step
    return beta


def at_bound(beta: float) -> bool:
    """Whether a fitted beta is NaN or sits on a bound of the search (no interior minimum)."""
    return math.isnan(beta) or beta >= BETA_MAX * (1 - 1e-6) or beta <= BETA_MIN * (1 + 1e-6)


def calibration_split(
    n: int, seed: int, fraction: float = 0.2
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(calibration, heldout)`` example indices of a split of ``n`` examples.

    The calibration subset is the first ``round(fraction * n)`` (at least 1, at most n - 1) of
    ``torch.randperm(n)`` drawn from ``torch.Generator().manual_seed(seed)``, the held-out subset
    the rest; both are sorted int64 CPU tensors. ``n`` counts examples (windows for
    ``next-token``: :meth:`lmc.data.tasks.Task.rows` gives their positions' rows).
    """
    if n < 2:
        raise LmcError(f"calibration needs at least 2 examples, got {n}")
    if not 0.0 < fraction < 1.0:
        raise LmcError(f"calibration fraction must be in (0, 1), got {fraction}")
    k = calibration_subset_size(n, fraction)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))
    return order[:k].sort().values, order[k:].sort().values


def calibration_subset_size(n: int, fraction: float = 0.2) -> int:
    """The number of examples :func:`calibration_split` puts in the calibration subset of a
    split of ``n`` examples: ``round(fraction * n)``, at least 1 and at most ``n - 1``."""
    return min(n - 1, max(1, round(fraction * n)))


def resolve_calibration(method: str, n: int, fraction: float = 0.2) -> str:
    """The calibration a split of ``n`` examples gets: ``split`` or ``crossfit``.

    ``auto`` is ``crossfit`` when :func:`calibration_subset_size` ``(n, fraction)`` is below
    :data:`AUTO_MIN_CALIBRATION` (a beta fitted on fewer examples is noisy, and a small subset
    is often perfectly classified, leaving beta at its bound), ``split`` otherwise; the other
    two are returned unchanged.
    """
    if method not in CALIBRATIONS:
        raise LmcError(f"unknown calibration {method!r}: choose one of {', '.join(CALIBRATIONS)}")
    if method != "auto":
        return method
    return "crossfit" if calibration_subset_size(n, fraction) < AUTO_MIN_CALIBRATION else "split"


def crossfit_folds(n: int, seed: int, folds: int = 5) -> list[torch.Tensor]:
    """The ``folds`` folds of a split of ``n`` examples, for cross-fitted calibration.

    ``torch.randperm(n)`` drawn from ``torch.Generator().manual_seed(seed)`` is cut into
    ``folds`` consecutive pieces (``torch.tensor_split``: sizes differ by at most one); each
    fold is a sorted int64 CPU tensor, and every example is in exactly one fold.
    """
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise LmcError(f"cross-fitted calibration needs at least 2 folds, got {folds!r}")
    if n < folds:
        raise LmcError(
            f"cross-fitted calibration with {folds} folds needs at least {folds} examples, "
            f"got {n}; use fewer calibration_folds"
        )
    order = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))
    return [part.sort().values for part in torch.tensor_split(order, folds)]
