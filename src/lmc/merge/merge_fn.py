"""The merged state theta(lam) as evaluation sees it: interpolated, then BatchNorm fixed."""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn

from .batchnorm import batchnorm_output_stats, repair, reset_batchnorm, resolve_bn_mode
from .interpolate import StateDict, lerp


def bn_aware_merge(
    model_a: nn.Module,
    model_b: nn.Module,
    bn: str,
    train_inputs: torch.Tensor | None,
    *,
    state_b: StateDict | None = None,
) -> Callable[[StateDict, StateDict, float], StateDict] | None:
    """A ``merge(state_a, state_b, lam) -> state`` giving theta(lam) = (1 - lam) A + lam B with
    BatchNorm statistics reset (or REPAIRed against A and B) on ``train_inputs``, as
    :func:`lmc.metrics.evaluate_path` does; ``None`` (plain interpolation) when the resolved
    ``bn`` mode is ``none``. ``state_b`` is B's state to use (e.g. B aligned to A) for REPAIR's
    endpoint statistics. Neither model is changed."""
    mode = resolve_bn_mode(model_a, bn)
    if mode == "none":
        return None
    scratch = copy.deepcopy(model_a)
    endpoint_b = copy.deepcopy(model_b)
    if state_b is not None:
        endpoint_b.load_state_dict(state_b)
    stats: dict[str, dict] = {}
    if mode == "repair":  # the endpoints' channel statistics, measured once for every lambda
        stats["stats_a"] = batchnorm_output_stats(model_a, train_inputs)
        stats["stats_b"] = batchnorm_output_stats(endpoint_b, train_inputs)

    def merge(sa: StateDict, sb: StateDict, lam: float) -> StateDict:
        scratch.load_state_dict(lerp(sa, sb, lam))
        if mode == "repair":
            repair(scratch, model_a, endpoint_b, lam, train_inputs, **stats)
        else:
            reset_batchnorm(scratch, train_inputs)
        return {k: v.detach().clone() for k, v in scratch.state_dict().items()}

    return merge
