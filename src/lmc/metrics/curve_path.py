"""Evaluating a curve between two models (:class:`lmc.merge.curves.Curve`) like the line.

:func:`evaluate_curve` is :func:`lmc.metrics.evaluate_path` with the curve's point θ(t) in
place of the line's θ(λ): the same grid (:func:`lmc.metrics.lambda_grid`, its values read as
t; t = 0 is A, t = 1 is B), the same per-point numbers (:class:`lmc.metrics.PathResult`, its
``lambdas`` the t values), calibration, and the ensemble (1 − t)f_A + tf_B of the endpoints'
logits (docs/science.md: barriers, calibration and ensembles are defined along t as along
λ), so :meth:`PathResult.barriers` gives the curve's barriers.

The model's ``forward(x)`` must return the logits as one tensor (a tuple, dict or Hugging Face
``ModelOutput`` is refused with ``LmcError``: :func:`lmc.merge.curves.check_model_output`).
Every interior point is loaded into a working copy of the model and, for a BatchNorm model
(``bn`` ``auto``/``reset``), its statistics are recomputed on ``bn_inputs``
(:func:`lmc.merge.reset_batchnorm`) before one forward over the split (the ``loop`` engine,
:class:`lmc.metrics.engine.LoopEngine`). REPAIR, which targets the line's interpolated channel
statistics, is not defined for a curve. The endpoints are the curve's own states, evaluated
without a reset (as the line's; ``reset_endpoints`` resets them too), so a curve and the line
between the same models share their endpoints' numbers bit for bit.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from lmc.config import LmcError, LmcWarning
from lmc.data.tasks import Task, get_task
from lmc.merge import reset_batchnorm
from lmc.merge.curves import Curve, check_model_output
from lmc.models import eval_mode, module_device

from .engine import LoopEngine, auto_batch_size, model_logits
from .path import _check_inputs, _settings
from .result import LambdaMetrics, PathResult
from .settings import PathSettings


def evaluate_curve(
    curve: Curve,
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    settings: PathSettings | int | Sequence[float] | None = None,
    *,
    bn_inputs: torch.Tensor | None = None,
    task: Task | str = "classification",
    **options: Any,
) -> PathResult:
    """Evaluate the curve θ(t) on ``x, y`` at every t of the grid.

    Args:
        curve: the curve (its states on ``model``'s device, or moved there).
        model: a module of the curve's architecture (e.g. model A); its weights are not used
            and it is not changed.
        x, y: the evaluation split, as for :func:`lmc.metrics.evaluate_path`.
        settings: a :class:`lmc.metrics.PathSettings` or the grid (its ``lambdas`` are the t
            values); ``**options`` any of its fields. ``method`` must be ``auto`` or ``loop``
            and ``bn`` one of ``auto``/``reset``/``none``.
        bn_inputs: training inputs for the BatchNorm reset at every point (required for a
            BatchNorm model with ``bn`` ``auto``/``reset``).
        task: the task (:mod:`lmc.data.tasks`) or its name.

    Returns a :class:`lmc.metrics.PathResult` whose ``lambdas`` are the t values, ``path``
    the curve's kind (``line``, ``bezier``, ``chain``), ``method`` ``loop`` and ``bn`` the
    resolved BatchNorm mode.
    """
    s = _settings(settings, options)
    if s.bn == "repair":
        raise LmcError(
            "REPAIR is defined for the line only (it targets the interpolated endpoints' "
            "channel statistics); use bn='reset' for a curve"
        )
    if s.method == "batched":
        raise LmcError("a curve is evaluated point by point: use method='loop' (or 'auto')")
    task = get_task(task)
    if len(x):  # a tuple, dict or ModelOutput is refused in one line (no logits to read)
        check_model_output(model, x, source="the model")
    bn_mode = _check_inputs(model, x, y, s.bn, bn_inputs, task)
    grid, added = s.grid()
    device = module_device(model)
    metrics = LambdaMetrics(
        y.to(device), s.calibrate, s.calibration_seed, s.calibration_fraction,
        method=s.calibration, folds=s.calibration_folds, task=task,
    )  # fmt: skip
    kw = dict(batch_size=s.bn_batch_size, num_batches=s.bn_num_batches, seed=s.seed, quiet=True)
    with eval_mode(model):
        work = copy.deepcopy(model).eval()

        def prepare(t: float, reset: bool = True) -> nn.Module:
            work.load_state_dict(curve.point(t))
            if reset and bn_mode == "reset":
                reset_batchnorm(work, bn_inputs, **kw)
            return work

        bs = s.batch_size or auto_batch_size(model, x, 1, device)
        reset_ends = s.reset_endpoints
        z_a = model_logits(prepare(0.0, reset_ends), x, bs, device)
        z_b = model_logits(prepare(1.0, reset_ends), x, bs, device)
        rows = {0.0: metrics([0.0], z_a[None], z_a, z_b)[0]}
        rows[1.0] = metrics([1.0], z_b[None], z_a, z_b)[0]
        engine = LoopEngine(prepare, x, device, batch_size=bs, desc=f"curve ({curve.kind})")
        for ts, z in engine.run([t for t in grid if 0.0 < t < 1.0], quiet=s.quiet):
            rows.update(zip(ts, metrics(ts, z, z_a, z_b)))
    result = PathResult.from_rows(
        grid, [rows[t] for t in grid], added_lambdas=added, bn=bn_mode, method=engine.name,
        path=curve.kind.name, **metrics.description(),
    )  # fmt: skip
    message = result.calibration_warning()
    if message is not None:
        warnings.warn(message, LmcWarning, stacklevel=2)
    return result


__all__ = ["evaluate_curve"]
