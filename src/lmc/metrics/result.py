"""The per-lambda numbers of a path: their names, how they are computed from logits, and the
:class:`PathResult` that holds them.

Path: theta(lam) = (1 - lam) * theta_A + lam * theta_B; lam = 0 is A. Every number is float64;
losses are mean cross-entropies in nats, accuracies fractions in [0, 1]. Per lambda (the
examples used in parentheses; "scored examples" are the held-out subset of
:func:`lmc.metrics.calibration_split` with the ``split`` calibration and every example with
``crossfit``, :mod:`lmc.metrics.calibration`):

- ``loss``: mean cross-entropy of theta(lam) (full split; the task's loss,
  :meth:`lmc.data.tasks.Task.stack_losses`, e.g. a regression's squared error)
- ``accuracy``: fraction of correct argmax predictions (full split; ``None``, as
  ``ensemble_accuracy``, for a task without an accuracy)
- ``calibrated_loss``: cross-entropy of softmax(beta * logits) (scored examples; with
  ``crossfit`` each example is scored with the beta fitted on the other folds)
- ``inverse_temperature``: beta (``split``: fitted on the calibration subset; ``crossfit``:
  fitted on every example, the beta the fold fits estimate)
- ``ensemble_loss`` / ``ensemble_accuracy``: of the logits (1 - lam) f_A + lam f_B (full split)
- ``logit_norm``: mean over examples of the L2 norm of the logits (full split)
- ``heldout_loss``: uncalibrated cross-entropy (beta = 1) (scored examples: the very examples
  ``calibrated_loss`` uses)
- ``ensemble_calibrated_loss`` / ``ensemble_inverse_temperature``: the same for the ensemble.

The calibrated ones (and ``heldout_loss``) exist only when the path was calibrated, which a
task without calibration (``Task.calibrates`` false) refuses with an ``LmcError``.

The task (:mod:`lmc.data.tasks`) says what a prediction is: an example (``classification``) or
a position of a token window (``next-token``). Losses, accuracies and logit norms are
means over every prediction of the examples used (nats per token for next-token); examples and
subsets are whole examples (whole windows), and one beta is fitted over all the predictions
(every position's logits) of its fitting examples.

Undefined calibration: a lambda's calibration is undefined when any beta fitted for it lies on
a bound of the search (:func:`lmc.metrics.calibration.at_bound`; ``split``: its one beta;
``crossfit``: any fold's beta or the all-examples beta) or its logits are not finite. Then both
its ``inverse_temperature`` and its ``calibrated_loss`` are NaN (a beta at the bound is an
artefact of the search, not an estimate: it is never reported, so it can never be averaged)
and the lambda is listed in ``calibration_at_bound`` (``ensemble_calibration_at_bound``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from lmc.config import LmcError
from lmc.data.tasks import Task, get_task

from .barriers import barriers as _barriers
from .calibration import (
    at_bound,
    calibration_split,
    crossfit_folds,
    fit_inverse_temperature,
    fit_inverse_temperatures,
    mean_cross_entropy,
    resolve_calibration,
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


def import_pandas() -> Any:
    """The ``pandas`` module, imported on first use (an optional dependency: ``to_dataframe``
    methods need it); an :class:`lmc.config.LmcError` saying how to install it when absent."""
    try:
        import pandas
    except ImportError as exc:
        raise LmcError(
            "to_dataframe() needs pandas, which is not installed: pip install 'lmc[pandas]' "
            "(or pip install pandas)"
        ) from exc
    return pandas


def _fit(z: torch.Tensor, y: torch.Tensor) -> float:
    if not torch.isfinite(z).all():
        return math.nan
    return fit_inverse_temperature(z, y)


def _fit_all(z: torch.Tensor, y: torch.Tensor, subsets: list) -> list[float]:
    """One model's betas on each of ``subsets`` of its rows (NaN for non-finite logits)."""
    if not torch.isfinite(z).all():
        return [math.nan] * len(subsets)
    return fit_inverse_temperatures(z, y, subsets)


class LambdaMetrics:
    """Turns a stack of models' logits on the split into their per-lambda numbers.

    ``y``: the split's targets on the logits' device, as ``task`` lays them out
    (classification: (N,) int64 labels; next-token: (N, T)); ``task``: a
    :class:`lmc.data.tasks.Task` or its name (default ``classification``). With ``calibrate``
    the calibration ``method`` (``auto``/``split``/``crossfit``) is resolved once for the split
    by :func:`lmc.metrics.calibration.resolve_calibration` ``(method, N, fraction)``; ``split``
    divides the N examples by :func:`lmc.metrics.calibration_split` ``(N, seed, fraction)``,
    ``crossfit`` by :func:`lmc.metrics.calibration.crossfit_folds` ``(N, seed, folds)``; the
    subsets are whole examples (whole windows), mapped to their predictions' rows by
    :meth:`lmc.data.tasks.Task.rows`. Everything but the beta searches is computed for the
    whole stack at once (a handful of kernels per chunk of lambdas, not per lambda), on the
    task's flattened predictions (M = N·P rows), and each prediction's cross-entropy is
    computed once: the held-out loss is a subset mean of the same rows.
    """

    def __init__(
        self,
        y: torch.Tensor,
        calibrate: bool,
        seed: int,
        fraction: float,
        method: str = "split",
        folds: int = 5,
        task: Task | str = "classification",
    ) -> None:
        self.task = get_task(task)
        if calibrate:
            self.task.require_calibration("calibrating the path")
        self.num_examples = len(y)
        per = self.task.predictions_per_example(y)
        y = self.task.flatten_target(y)  # (M,): one label per prediction
        self.y = y
        self.calibrate, self.seed, self.fraction = calibrate, seed, fraction
        n = self.num_examples
        self.method = resolve_calibration(method, n, fraction) if calibrate else None
        self.num_folds = folds if self.method == "crossfit" else None
        if self.method == "split":
            cal, held = calibration_split(n, seed, fraction)  # whole examples
            self.num_cal, self.num_held = len(cal), len(held)
            cal, held = self.task.rows(cal, per), self.task.rows(held, per)
            self.cal, self.held = cal.to(y.device), held.to(y.device)
            self.y_cal, self.y_held = y[self.cal], y[self.held]
        elif self.method == "crossfit":
            parts = crossfit_folds(n, seed, folds)  # whole examples
            fold_of = torch.empty(n, dtype=torch.int64)
            for k, part in enumerate(parts):
                fold_of[part] = k
            if per != 1:
                fold_of = fold_of.repeat_interleave(per)  # each prediction's fold
            self.fold_of = fold_of.to(y.device)
            self.fits = [torch.nonzero(fold_of != k).squeeze(1).to(y.device) for k in range(folds)]
            self.smallest_fit = n - max(len(part) for part in parts)

    def description(self) -> dict[str, Any]:
        """The :class:`PathResult` fields that describe the split and its calibration
        (``num_examples``, ``calibrate``, ``calibration_method``, ``calibration_folds``,
        ``calibration_seed``, ``calibration_fraction``, ``num_calibration``, ``num_heldout``;
        the calibration ones ``None`` when not calibrating). ``split``: ``num_calibration`` /
        ``num_heldout`` are the two subsets' sizes, ``calibration_folds`` is ``None``.
        ``crossfit``: ``num_calibration`` is the fewest examples a fold's beta was fitted on,
        ``num_heldout`` is N (every example scored once), ``calibration_fraction`` is ``None``.
        All counts are examples (whole windows for next-token), not predictions.
        """
        method, n = self.method, self.num_examples
        if method == "split":
            num_cal, num_held = self.num_cal, self.num_held
        elif method == "crossfit":
            num_cal, num_held = self.smallest_fit, n
        else:
            num_cal = num_held = None
        return {
            "num_examples": n,
            "calibrate": self.calibrate,
            "calibration_method": method,
            "calibration_folds": self.num_folds,
            "calibration_seed": self.seed if method else None,
            "calibration_fraction": self.fraction if method == "split" else None,
            "num_calibration": num_cal,
            "num_heldout": num_held,
        }

    def _calibrate(self, z: torch.Tensor) -> tuple[list[float], list[float]]:
        """Per model of the stack ``z`` (k, M, C): its reported beta and its calibrated loss.

        ``split``: beta fitted on the calibration subset, loss on the held-out subset.
        ``crossfit``: per fold, beta fitted on the other folds scores that fold's examples; the
        loss is the mean over all N examples; the reported beta is fitted on all of them.
        A model whose calibration is undefined (module doc: any of its betas on a bound of the
        search, e.g. a perfectly classified fitting set, where beta -> infinity) gets NaN for
        both: not the numbers at the arbitrary bound.
        """
        count = z.shape[0]
        if self.method == "split":
            betas = torch.tensor(
                [_fit(z[k, self.cal], self.y_cal) for k in range(count)], dtype=torch.float64
            )
            undefined = [at_bound(b) for b in betas.tolist()]
            per_example = betas.view(-1, 1).expand(-1, len(self.held))
            scored, y_scored = z[:, self.held], self.y_held
        else:
            fitted = torch.tensor(
                [_fit_all(z[k], self.y, [None, *self.fits]) for k in range(count)],
                dtype=torch.float64,
            )  # (count, 1 + K): all examples, then each fold's fitting set
            betas, fold_betas = fitted[:, 0], fitted[:, 1:]
            undefined = [
                at_bound(b) or any(at_bound(f) for f in row)
                for b, row in zip(betas.tolist(), fold_betas.tolist())
            ]
            per_example = fold_betas[:, self.fold_of.cpu()]  # (count, N): each example's beta
            scored, y_scored = z, self.y
        per_example = torch.nan_to_num(per_example, nan=0.0).to(z.device)
        losses = mean_cross_entropy(scored.double() * per_example.unsqueeze(2), y_scored).tolist()
        return (
            [math.nan if bad else b for bad, b in zip(undefined, betas.tolist())],
            [math.nan if bad else v for bad, v in zip(undefined, losses)],
        )

    def __call__(
        self, lams: list[float], z: torch.Tensor, z_a: torch.Tensor, z_b: torch.Tensor
    ) -> list[dict[str, float]]:
        """One dict per lambda of ``lams``, keyed by :data:`PER_LAMBDA_KEYS` (the calibrated
        keys only when calibrating); ``z``: (k, N, ..., C) logits of theta(lam) for those
        lambdas, ``z_a``, ``z_b``: (N, ..., C) logits of the endpoints (the task's output
        layout; classification (k, N, C) and (N, C)). The ensemble is the logit ensemble
        (1 - lam) f_A + lam f_B at every prediction (every position of a window)."""
        y, task = self.y, self.task
        lam = torch.tensor(lams, dtype=z_a.dtype, device=z_a.device).view(-1, *[1] * z_a.dim())
        z_ens = task.flatten_stack((1.0 - lam) * z_a + lam * z_b)
        z = task.flatten_stack(z)  # (k, M, C): one row per prediction
        ce = task.stack_losses(z, y)
        accuracy = task.stack_accuracy(z, y)
        ensemble_accuracy = task.stack_accuracy(z_ens, y)
        cols: dict[str, list[float]] = {
            "loss": ce.mean(dim=1).tolist(),
            "accuracy": accuracy.tolist() if accuracy is not None else None,
            "logit_norm": torch.linalg.vector_norm(z.double(), dim=2).mean(dim=1).tolist(),
            "ensemble_loss": task.stack_losses(z_ens, y).mean(dim=1).tolist(),
            "ensemble_accuracy": (
                ensemble_accuracy.tolist() if ensemble_accuracy is not None else None
            ),
        }
        cols = {key: values for key, values in cols.items() if values is not None}
        if self.calibrate:
            held = ce[:, self.held] if self.method == "split" else ce
            cols["heldout_loss"] = held.mean(dim=1).tolist()
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
    (:func:`lmc.metrics.evaluate_path`; the calibration ones by
    :meth:`LambdaMetrics.description`): ``calibration_method`` is the calibration used,
    ``split`` or ``crossfit`` (``None`` when not calibrated; ``auto`` is resolved),
    ``calibration_folds`` its K (``crossfit`` only). ``calibration_at_bound`` /
    ``ensemble_calibration_at_bound`` list the lambdas whose calibration is undefined (a beta
    on a bound of its search: their inverse temperature and calibrated loss are NaN).
    ``path`` is the path's kind (:data:`lmc.merge.curves.PATH_KINDS`): ``line`` for
    θ(λ) = (1 − λ)θ_A + λθ_B (:func:`lmc.metrics.evaluate_path`), ``bezier`` or ``chain`` for
    a curve (:func:`lmc.metrics.curve_path.evaluate_curve`, whose ``lambdas`` are its t
    values); a record written before the kind was kept has none and is a line
    (:func:`lmc.metrics.barriers.path_kind_of`).

    In a notebook: :meth:`plot` draws it on a matplotlib axes, :meth:`to_dataframe` gives one
    row per lambda (pandas); :meth:`rows` and :meth:`curves` need neither.
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
    calibration_method: str | None = None
    calibration_folds: int | None = None
    calibration_seed: int | None = None
    calibration_fraction: float | None = None
    num_examples: int = 0
    num_calibration: int | None = None
    num_heldout: int | None = None
    added_lambdas: list[float] = field(default_factory=list)
    calibration_at_bound: list[float] = field(default_factory=list)
    ensemble_calibration_at_bound: list[float] = field(default_factory=list)
    path: str = "line"

    @classmethod
    def from_rows(
        cls, lambdas: Sequence[float], rows: Sequence[Mapping[str, float]], **info: Any
    ) -> PathResult:
        """A result from one dict per lambda (as :class:`LambdaMetrics` gives them): each key
        of :data:`PER_LAMBDA_KEYS` becomes a column (``None`` when the rows lack it), the
        at-bound lists are derived from the inverse temperatures (NaN: undefined, module doc),
        ``info`` fills the rest."""
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

    def to_dataframe(self) -> Any:
        """A ``pandas.DataFrame`` with one row per λ (in the order of ``lambdas``): the column
        ``lambda``, then every per-lambda metric (:data:`PER_LAMBDA_KEYS`, float64; NaN where
        not computed or undefined). Needs pandas (``pip install 'lmc[pandas]'``); imported
        only when called."""
        pd = import_pandas()
        columns = ["lambda", *PER_LAMBDA_KEYS]
        frame = pd.DataFrame(self.rows(), columns=columns)
        return frame.astype("float64")

    def plot(
        self,
        ax: Any = None,
        *,
        metric: str = "loss",
        calibrated: bool = True,
        ensemble: bool = False,
    ) -> Any:
        """Draw the path on a matplotlib ``Axes`` and return it.

        ``ax``: the axes to draw on (e.g. ``plt.subplots()[1]`` in a notebook); ``None``: a new
        figure of one axes (object API, no pyplot state; reach it with ``ax.figure``).
        ``metric``: ``loss`` (cross-entropy in nats, with the calibrated loss when the path was
        calibrated and ``calibrated``) or ``accuracy`` (fraction). ``ensemble``: also the
        ensemble (1 - lam) f_A + lam f_B (dotted). One line per curve, λ = 0 (A) at the left,
        A and B marked with dots, a legend. The drawing is
        :func:`lmc.metrics.figures.draw_path_curves` (matplotlib imported on first use).
        """
        from .figures import draw_path_curves, new_figure

        if ax is None:
            _, axes = new_figure(1, 1, panel=(5.0, 3.6))
            ax = axes[0, 0]
        draw_path_curves(ax, self, metric, calibrated=calibrated, ensemble=ensemble)
        ax.legend(fontsize=8)
        return ax

    def calibration_warning(self) -> str | None:
        """What :func:`lmc.metrics.evaluate_path` warns about when the calibration hit its
        bound (which lambdas, the examples beta was fitted on, that the inverse temperature and
        calibrated loss are undefined there), or ``None`` when it did not."""
        if not (self.calibration_at_bound or self.ensemble_calibration_at_bound):
            return None

        def lams(values: list[float]) -> str:
            return "λ = " + ", ".join(f"{v:g}" for v in values) if values else "no λ"

        if self.calibration_method == "crossfit":
            where = (
                f"in the {self.calibration_folds}-fold cross-fitted calibration of the "
                f"{self.num_examples}-example split (each fold's beta fitted on at least "
                f"{self.num_calibration} examples)"
            )
            remedy = (
                "use a larger split, or more calibration_folds (each beta is then fitted on "
                "more of it)"
            )
        else:
            where = f"on the {self.num_calibration}-example calibration subset"
            remedy = "use a larger split or calibration_fraction, or calibration='crossfit'"
        return (
            f"calibration hit the bound of its search at {lams(self.calibration_at_bound)} "
            f"(ensemble: {lams(self.ensemble_calibration_at_bound)}) {where}: the inverse "
            "temperature is not identifiable there (e.g. the examples are perfectly classified, "
            "beta -> infinity), so the calibrated loss is undefined there (NaN), as are the "
            f"inverse temperature and every calibrated barrier using them; {remedy}"
        )
