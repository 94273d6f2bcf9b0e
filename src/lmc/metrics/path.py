"""Evaluating the linear path between two models in few passes over the data.

Path: theta(lam) = (1 - lam) * theta_A + lam * theta_B on a grid of lambdas (``lambda_grid``),
lam = 0 is A, lam = 1 is B. Per lambda, :func:`evaluate_path` reports the numbers of
:data:`lmc.metrics.PER_LAMBDA_KEYS` (every number in float64; which examples each uses is in
:mod:`lmc.metrics.result`): losses in nats, accuracies as fractions, logit norms, the ensemble
(1 - lam) f_A + lam f_B, and with ``calibrate`` the fitted inverse temperature beta and the
calibrated loss.

Calibration (``calibration``, :mod:`lmc.metrics.calibration`): ``split`` fits beta on a fixed
random ``calibration_fraction`` (default 20%) of the split's examples, the first
``round(fraction * N)`` of ``torch.randperm(N)`` drawn from
``torch.Generator().manual_seed(calibration_seed)``, and scores the rest; ``crossfit`` cuts the
split into ``calibration_folds`` seeded folds, fits beta on all folds but one and scores that
one, so every example is scored once; ``auto`` (the default) cross-fits when the calibration
subset would hold fewer than 1000 examples (splits under 5000 examples, e.g. digits) and splits
otherwise. The result records the calibration used (``calibration_method``,
``calibration_folds``). The same subsets or folds serve every lambda (endpoints included), so
calibrated barriers compare like with like, and ``heldout_loss`` gives the uncalibrated loss on
the very examples ``calibrated_loss`` scores.

When the examples a beta is fitted on are perfectly classified the cross-entropy falls for ever
as beta grows: beta is not identifiable and ``fit_inverse_temperature`` returns its upper bound.
Such a lambda's calibration is undefined (:mod:`lmc.metrics.result`): its inverse temperature
and calibrated loss (hence every calibrated barrier using it) are NaN (``null`` in JSON), the
lambdas concerned are listed in ``calibration_at_bound`` (``ensemble_calibration_at_bound``) and
:func:`evaluate_path` warns (:class:`lmc.config.LmcWarning`). Small calibration subsets make
this likely (digits' 451 test examples give a 90-example subset with ``split``), which is why
``auto`` cross-fits there.

How the grid's interior is evaluated (``method``, :func:`lmc.metrics.engine.select_engine`,
chosen once before any point is evaluated):

- ``batched`` (the default whenever nothing has to be recomputed per lambda, i.e. the resolved
  BatchNorm mode is ``none``): the interior lambdas' weights are stacked and evaluated together
  in one batched forward per batch of examples, in chunks of lambdas bounded by
  ``max_stack_bytes``: ``torch.vmap`` over ``torch.func.functional_call`` for any model, or,
  for a plain chain of Linear layers and activations (:func:`lmc.metrics.chain.chain_plan`: the
  zoo's MLPs without BatchNorm), layer by layer one ``addmm`` per model. ``auto`` probes it on
  2 examples and falls back to the loop when ``torch.vmap`` cannot batch the model.
- ``loop``: one forward pass over the split per lambda (needed when BatchNorm statistics are
  reset or REPAIRed for each lambda).

The endpoints are always the models themselves (A, and B or ``state_b``), evaluated with a plain
forward; their logits serve as lam = 0 and lam = 1 of the path, so the path's endpoints equal the
models' own numbers bit for bit. With BatchNorm ``reset``/``repair`` only the interior points are
reset (the endpoints keep the statistics training gave them) unless ``reset_endpoints=True``.

The task (``task``, :mod:`lmc.data.tasks`; default ``classification``) says what the models'
outputs and the labels are: ``classification`` (logits (N, C), labels (N,)) or ``next-token``
(logits (N, T, C) for token windows, targets (N, T)). Every metric is over all predictions
(every position of every window: nats per token, the fraction of positions predicted), one beta
is fitted over all positions' logits, and the calibration subsets and folds are whole windows
(:mod:`lmc.metrics.result`).

Memory: the logits of the two endpoints and of one chunk of lambdas, ``(2 + k) * N * C`` floats
(``(2 + k) * N * T * C`` for next-token), are held on the models' device; no hidden
activations are kept.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from lmc.config import LmcError, LmcWarning, check_finite
from lmc.data.tasks import Task, get_task
from lmc.merge import (
    batchnorm_output_stats,
    lerp_into,
    repair,
    reset_batchnorm,
    resolve_bn_mode,
)
from lmc.models import check_same_architecture, eval_mode, module_device

from .calibration import calibration_split
from .engine import ENGINES, METHODS, auto_batch_size, model_logits, select_engine
from .result import LambdaMetrics, PathResult
from .settings import PathSettings, lambda_grid

__all__ = [
    "ENGINES",
    "METHODS",
    "PathResult",
    "PathSettings",
    "calibration_split",
    "evaluate_path",
    "lambda_grid",
]


def evaluate_path(
    model_a: nn.Module,
    model_b: nn.Module | None,
    x: torch.Tensor,
    y: torch.Tensor,
    settings: PathSettings | int | Sequence[float] | None = None,
    *,
    state_b: Mapping[str, torch.Tensor] | None = None,
    bn_inputs: torch.Tensor | None = None,
    task: Task | str = "classification",
    **options: Any,
) -> PathResult:
    """Evaluate theta(lam) = (1 - lam) theta_A + lam theta_B on ``x, y`` for every lam of the grid.

    Args:
        model_a, model_b: two models of one architecture (``model_b`` may be ``None`` when
            ``state_b`` is given). Neither is changed (their train/eval modes are restored).
        x, y: the evaluation split, ``(N, ...)`` inputs and the targets as ``task`` lays them
            out (``(N,)`` int64 labels; next-token: ``(N, T)``), on any device (batches are
            moved to ``model_a``'s device).
        settings: a :class:`PathSettings`, or the ``lambdas`` (a number of points or a list) of
            the keyword form; ``None``: the defaults.
        state_b: a state dict to use as B (e.g. B aligned to A); overrides ``model_b``'s weights.
        bn_inputs: training inputs ``(M, ...)`` for BatchNorm ``reset``/``repair`` (required for
            those modes).
        task: a :class:`lmc.data.tasks.Task` or its name (``get_task(dataset.task)`` for a
            dataset's split); default ``classification``.
        **options: any field of :class:`PathSettings` (``bn``, ``calibrate``, ``batch_size``,
            ``method``, ...), applied on top of ``settings``.

    Returns a :class:`PathResult` (the resolved BatchNorm mode, the engine and the calibration
    used recorded). Warns with :class:`lmc.config.LmcWarning` when calibration hits its bound.
    """
    s = _settings(settings, options)
    task = get_task(task)
    bn_mode = _check_inputs(model_a, x, y, s.bn, bn_inputs, task)
    grid, added = s.grid()
    device = module_device(model_a)
    state_a, state_b = _endpoint_states(model_a, model_b, state_b)
    metrics = LambdaMetrics(
        y.to(device), s.calibrate, s.calibration_seed, s.calibration_fraction,
        method=s.calibration, folds=s.calibration_folds, task=task,
    )  # fmt: skip
    with eval_mode(model_a):
        work = copy.deepcopy(model_a).eval()  # B's weights, then each theta(lam) in turn
        work.load_state_dict(state_b)
        prepare = _preparer(work, model_a, state_a, state_b, bn_mode, bn_inputs, s)
        engine = select_engine(
            s.method, bn_mode=bn_mode, model=work, state_a=state_a, state_b=state_b, x=x,
            device=device, prepare=prepare, batch_size=s.batch_size,
            max_stack_bytes=s.max_stack_bytes, fast=s.fast,
        )  # fmt: skip
        bs = s.batch_size or auto_batch_size(model_a, x, 1, device)
        reset_ends = s.reset_endpoints and bn_mode != "none"
        z_a = model_logits(prepare(0.0) if reset_ends else model_a, x, bs, device)
        z_b = model_logits(prepare(1.0) if reset_ends else work, x, bs, device)
        rows = {0.0: metrics([0.0], z_a[None], z_a, z_b)[0]}
        rows[1.0] = metrics([1.0], z_b[None], z_a, z_b)[0]
        for lams, z in engine.run([lam for lam in grid if 0.0 < lam < 1.0], quiet=s.quiet):
            rows.update(zip(lams, metrics(lams, z, z_a, z_b)))
    result = PathResult.from_rows(
        grid, [rows[lam] for lam in grid], added_lambdas=added, bn=bn_mode, method=engine.name,
        **metrics.description(),
    )  # fmt: skip
    message = result.calibration_warning()
    if message is not None:
        warnings.warn(message, LmcWarning, stacklevel=2)
    return result


def _check_inputs(
    model_a: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    bn: str,
    bn_inputs: torch.Tensor | None,
    task: Task,
) -> str:
    """The resolved BatchNorm mode, after checking the split (its targets against the model's
    output on one example, as ``task`` lays them out) and that ``bn_inputs`` is given when the
    mode needs it."""
    if len(x) != len(y):
        raise LmcError(f"{len(x)} inputs but {len(y)} labels: give one label per example")
    if len(x) == 0:
        raise LmcError("cannot evaluate a path on an empty split")
    check_finite("x", x)
    with torch.no_grad(), eval_mode(model_a):  # one example: the model's output layout
        out = model_a(x[:1].to(module_device(model_a)))
    task.check(out, y, name="y")
    if bn_inputs is not None:
        check_finite("bn_inputs", bn_inputs)
    bn_mode = resolve_bn_mode(model_a, bn)
    if bn_mode != "none" and bn_inputs is None:
        raise LmcError(
            f"BatchNorm mode {bn_mode!r} needs training inputs (bn_inputs) to recompute the "
            "statistics of each interpolated model; pass them or use bn='none'"
        )
    return bn_mode


def _settings(settings: PathSettings | int | Sequence[float] | None, options: dict) -> PathSettings:
    """The settings of one call: ``settings`` (or the positional lambdas) and the keywords."""
    unknown = sorted(set(options) - set(PathSettings.option_names()))
    if unknown:
        raise TypeError(
            f"evaluate_path() got an unexpected keyword argument {unknown[0]!r}; its options "
            f"are those of PathSettings: {', '.join(PathSettings.option_names())}"
        )
    if isinstance(settings, PathSettings):
        return dataclasses.replace(settings, **options) if options else settings
    if settings is not None:
        if "lambdas" in options:
            raise TypeError("evaluate_path() got multiple values for 'lambdas'")
        options = {"lambdas": settings, **options}
    return PathSettings(**options)


def _endpoint_states(
    model_a: nn.Module, model_b: nn.Module | None, state_b: Mapping[str, torch.Tensor] | None
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """A's and B's detached state dicts, B's on A's devices (``state_b`` overrides ``model_b``);
    ``LmcError`` when their entries differ."""
    if model_b is None and state_b is None:
        raise LmcError("evaluate_path needs model_b or state_b")
    state_a = {k: v.detach() for k, v in model_a.state_dict().items()}
    if state_b is None:
        state_b = model_b.state_dict()
    state_b = {k: v.detach() for k, v in state_b.items()}
    check_same_architecture(state_a, state_b)
    return state_a, {k: v.to(state_a[k].device) for k, v in state_b.items()}


def _preparer(
    work: nn.Module,
    model_a: nn.Module,
    state_a: dict[str, torch.Tensor],
    state_b: dict[str, torch.Tensor],
    bn_mode: str,
    bn_inputs: torch.Tensor | None,
    s: PathSettings,
) -> Callable[[float], nn.Module]:
    """``prepare(lam)``: load theta(lam) into ``work`` and fix its BatchNorm statistics
    (``bn_mode``; the batches of ``s``). For REPAIR the endpoints' channel statistics are
    measured once, on the first call: A's on ``model_a``, B's on ``work`` loaded with B."""
    kw = dict(batch_size=s.bn_batch_size, num_batches=s.bn_num_batches, seed=s.seed, quiet=True)
    stats: dict[str, Any] = {}

    def prepare(lam: float) -> nn.Module:
        if bn_mode == "repair" and not stats:
            work.load_state_dict(state_b)
            stats["stats_a"] = batchnorm_output_stats(model_a, bn_inputs, **kw)
            stats["stats_b"] = batchnorm_output_stats(work, bn_inputs, **kw)
        lerp_into(work, state_a, state_b, lam)
        if bn_mode == "reset":
            reset_batchnorm(work, bn_inputs, **kw)
        elif bn_mode == "repair":  # B's statistics are given: the model_b argument is unused
            repair(work, model_a, work, lam, bn_inputs, **stats, **kw)
        return work

    return prepare
