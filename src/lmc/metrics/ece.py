"""Expected calibration error (ECE) and the reliability diagram (docs/science.md, calibration).

Definition, for ``n`` examples with predicted class probabilities ``p_i`` (rows of softmax of
the logits, or given probabilities):

- confidence ``c_i = max_k p_ik`` (the max-probability confidence) and prediction
  ``argmax_k p_ik`` (the first index on ties, as ``torch.argmax``); correct when it equals
  the label;
- ``bins`` equal-width confidence bins on [0, 1] (a setting, 15 by default): bin ``b``
  (0-based) holds the examples with ``b / bins < c_i <= (b + 1) / bins`` (right-closed; a
  confidence of exactly 0 goes to bin 0); the edges are ``linspace(0, 1, bins + 1)`` in
  float64;
- ``ECE = sum_b (n_b / n) * |accuracy_b - mean confidence_b|`` over the non-empty bins.

Everything is computed in float64 on the CPU. ECE is in [0, 1] (a fraction, like accuracies).

Tasks (``task=``, :mod:`lmc.data.tasks`; default ``classification``): for ``next-token``
the input is (N, T, C) logits or probabilities and (N, T) targets, and every position of every
window is one prediction ``i`` above (the ECE over all positions).
Git Re-Basin §5.4 reports the calibration of merged models; the width paper's temperature
calibration (:mod:`lmc.metrics.calibration`) is a different quantity (a loss).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from lmc.config import LmcError, check_finite, check_int, check_labels
from lmc.data.tasks import Task, get_task

#: The default number of equal-width confidence bins.
DEFAULT_BINS = 15
#: How the first argument is read: ``auto`` (see :func:`class_probabilities`), ``logits``,
#: ``probs``.
INPUT_KINDS = ("auto", "logits", "probs")
#: How far from 1 a row of probabilities may sum (absolute, per row) and still count as one.
PROBS_TOL = 1e-5


@dataclass(frozen=True)
class ReliabilityCurve:
    """Per-bin statistics of a reliability diagram (``bins`` equal-width confidence bins).

    ``edges``: (bins + 1,) bin edges in [0, 1]; ``counts``: (bins,) examples per bin;
    ``confidence``: (bins,) mean confidence per bin; ``accuracy``: (bins,) fraction correct
    per bin. Empty bins have NaN confidence and accuracy. ``n``: all examples.
    """

    edges: np.ndarray
    counts: np.ndarray
    confidence: np.ndarray
    accuracy: np.ndarray

    @property
    def bins(self) -> int:
        return len(self.counts)

    @property
    def n(self) -> int:
        return int(self.counts.sum())

    @property
    def ece(self) -> float:
        """``sum_b (n_b / n) |accuracy_b - confidence_b|`` over the non-empty bins."""
        full = self.counts > 0
        gaps = np.abs(self.accuracy[full] - self.confidence[full])
        return float((self.counts[full] / self.n * gaps).sum())


def class_probabilities(logits_or_probs: Any, kind: str = "auto") -> torch.Tensor:
    """The (N, C) float64 CPU class probabilities of ``logits_or_probs``.

    ``kind="logits"``: softmax of the rows. ``kind="probs"``: the rows as they are; every
    entry must lie in [0, 1] and every row sum to 1 within :data:`PROBS_TOL`. ``kind="auto"``:
    probabilities when that check passes, logits otherwise (pass ``kind`` explicitly when the
    input could be either).
    """
    if kind not in INPUT_KINDS:
        raise LmcError(f"kind must be one of {', '.join(INPUT_KINDS)}, got {kind!r}")
    if not isinstance(logits_or_probs, torch.Tensor):
        try:
            logits_or_probs = torch.as_tensor(np.asarray(logits_or_probs, dtype=np.float64))
        except (TypeError, ValueError) as exc:
            raise LmcError(
                f"logits_or_probs must be an (N, classes) array of numbers: {exc}"
            ) from exc
    z = logits_or_probs.detach()
    if not z.is_floating_point():
        z = z.double()
    if z.dim() != 2:
        raise LmcError(f"logits_or_probs must have shape (N, classes), got {tuple(z.shape)}")
    if z.shape[0] == 0:
        raise LmcError("logits_or_probs holds no examples: calibration needs at least one")
    if z.shape[1] < 2:
        raise LmcError(f"logits_or_probs needs at least 2 classes, got {z.shape[1]}")
    check_finite("logits_or_probs", z)
    z = z.to("cpu", torch.float64)
    looks_like_probs = bool(
        (z >= 0).all() and (z <= 1).all() and ((z.sum(1) - 1).abs() <= PROBS_TOL).all()
    )
    if kind == "probs" and not looks_like_probs:
        raise LmcError(
            "logits_or_probs are not probabilities (entries in [0, 1], rows summing to 1); "
            "pass kind='logits' for logits"
        )
    if kind == "probs" or (kind == "auto" and looks_like_probs):
        return z
    return torch.softmax(z, dim=1)


def _predictions(logits_or_probs: Any, labels: Any, task: Task | str) -> tuple[Any, Any]:
    """``(logits_or_probs, labels)`` with one row per prediction of ``task`` (classification:
    as given, untouched): the task's :meth:`lmc.data.tasks.Task.calibration_layout`;
    ``LmcError`` when the ECE has no meaning for the task (its outputs are not logits)."""
    task = get_task(task)
    task.require_calibration("the ECE")
    if task.target_axes == 1:
        return logits_or_probs, labels
    z = logits_or_probs
    if not isinstance(z, torch.Tensor):
        try:
            z = torch.as_tensor(np.asarray(z, dtype=np.float64))
        except (TypeError, ValueError) as exc:
            raise LmcError(f"logits_or_probs must be an array of numbers: {exc}") from exc
    if not isinstance(labels, torch.Tensor):
        labels = torch.as_tensor(np.asarray(labels))
    if labels.dim() != task.target_axes or tuple(z.shape[:-1]) != tuple(labels.shape):
        raise LmcError(
            f"the {task.name} task needs logits_or_probs of shape {task.output_layout()} and "
            f"labels of shape {task.target_layout()}, got {tuple(z.shape)} and "
            f"{tuple(labels.shape)}"
        )
    return task.calibration_layout(z, labels)


def reliability_curve(
    logits_or_probs: Any,
    labels: torch.Tensor,
    bins: int = DEFAULT_BINS,
    *,
    kind: str = "auto",
    task: Task | str = "classification",
) -> ReliabilityCurve:
    """Per-bin count, mean confidence and accuracy (module docstring for the binning).

    ``logits_or_probs``: (N, C) logits or probabilities (``kind``, see
    :func:`class_probabilities`); ``labels``: (N,) integer class indices in [0, C); or the
    layout of ``task`` (next-token: (N, T, C) and (N, T), every position one prediction).
    """
    bins = check_int("bins", bins, minimum=1)
    logits_or_probs, labels = _predictions(logits_or_probs, labels, task)
    probs = class_probabilities(logits_or_probs, kind)
    if not isinstance(labels, torch.Tensor):
        labels = torch.as_tensor(np.asarray(labels))
    check_labels("labels", labels, probs.shape[1])
    if labels.shape != (probs.shape[0],):
        raise LmcError(
            f"labels must have shape ({probs.shape[0]},) to match logits_or_probs, "
            f"got {tuple(labels.shape)}"
        )
    conf, pred = probs.max(dim=1)
    correct = (pred == labels.cpu().long()).double()
    edges = torch.linspace(0.0, 1.0, bins + 1, dtype=torch.float64)
    # bucketize(right=False): edges[i-1] < c <= edges[i] -> i, over the inner edges only
    which = torch.bucketize(conf, edges[1:-1], right=False)
    counts = torch.bincount(which, minlength=bins).double()
    conf_sum = torch.zeros(bins, dtype=torch.float64).index_add_(0, which, conf)
    acc_sum = torch.zeros(bins, dtype=torch.float64).index_add_(0, which, correct)
    safe = counts.clamp_min(1.0)
    empty = counts == 0
    confidence = torch.where(empty, math.nan, conf_sum / safe)
    accuracy = torch.where(empty, math.nan, acc_sum / safe)
    return ReliabilityCurve(
        edges=edges.numpy(),
        counts=counts.long().numpy(),
        confidence=confidence.numpy(),
        accuracy=accuracy.numpy(),
    )


def expected_calibration_error(
    logits_or_probs: Any,
    labels: torch.Tensor,
    bins: int = DEFAULT_BINS,
    *,
    kind: str = "auto",
    task: Task | str = "classification",
) -> float:
    """ECE = sum_b (n_b / n) |accuracy_b - mean confidence_b| (a fraction in [0, 1]).

    ``bins`` equal-width, right-closed confidence bins (a setting; 15 by default), the
    max-probability confidence; see the module docstring. ``logits_or_probs``: (N, C);
    ``labels``: (N,) class indices; or the layout of ``task`` (next-token: over all
    positions). Raises ``LmcError`` for malformed input.
    """
    return reliability_curve(logits_or_probs, labels, bins, kind=kind, task=task).ece


def draw_reliability_diagram(
    ax: Any,
    curve: ReliabilityCurve,
    *,
    label: str | None = None,
    color: str = "#0072B2",
    gap_color: str = "#D55E00",
) -> Any:
    """Draw ``curve`` into the matplotlib ``Axes`` ``ax`` and return ``ax``.

    Bars of per-bin accuracy (one per non-empty bin, the bin's width), the gap to the bin's
    mean confidence as a hatched bar, and the diagonal of perfect calibration. Only ``ax`` is
    touched (no pyplot state); the title reports the ECE. Axes: confidence (x) and accuracy
    (y), both in [0, 1].
    """
    if not hasattr(ax, "bar") or not hasattr(ax, "plot"):
        raise LmcError(f"ax must be a matplotlib Axes, got {type(ax).__name__}")
    full = curve.counts > 0
    left = curve.edges[:-1][full]
    width = np.diff(curve.edges)[full]
    acc = curve.accuracy[full]
    conf = curve.confidence[full]
    ax.bar(left, acc, width=width, align="edge", color=color, edgecolor="white",
           label=label or "accuracy")  # fmt: skip
    ax.bar(left, conf - acc, bottom=acc, width=width, align="edge", color="none",
           edgecolor=gap_color, hatch="//", label="gap to confidence")  # fmt: skip
    ax.plot([0, 1], [0, 1], color="#555555", linestyle="--", linewidth=1, label="calibrated")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("confidence (max probability)")
    ax.set_ylabel("accuracy")
    ax.set_title(f"ECE = {curve.ece:.4f} ({curve.bins} bins, n = {curve.n})")
    ax.legend(loc="upper left", frameon=False)
    return ax


def classification_metrics(
    logits: torch.Tensor,
    labels: torch.Tensor,
    bins: int = DEFAULT_BINS,
    *,
    task: Task | str = "classification",
) -> dict[str, float]:
    """``{"loss", "accuracy", "ece"}`` of ``logits`` (N, C) against ``labels`` (N,): the mean
    cross-entropy of softmax(logits) in nats (float64), the fraction classified correctly,
    and the ECE over ``bins`` equal-width confidence bins (:func:`expected_calibration_error`).
    With ``task="next-token"``: (N, T, C) and (N, T), each a mean over every position.
    The loss and the accuracy are the task's (:meth:`lmc.data.tasks.Task.stack_losses`,
    :meth:`lmc.data.tasks.Task.stack_accuracy`); ``LmcError`` for a task the ECE has no
    meaning for. What ``lmc merge`` and the merge-many study report for every model."""
    from .calibration import _check

    task = get_task(task)
    labels = labels.to(logits.device)
    logits, labels = _predictions(logits, labels, task)
    rows, targets = _check(logits, labels)
    return {
        "loss": task.stack_losses(rows[None], targets).mean(dim=1)[0].item(),
        "accuracy": float(task.stack_accuracy(rows[None], targets)[0]),
        "ece": expected_calibration_error(logits, labels, bins, kind="logits"),
    }
