"""Layer-level helpers of the analysis: bias-free weight products, the unfolded norm of a
convolution's input, activations as plain functions, and facts about a model."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .accumulators import to_stat


def has_bias(model: nn.Module) -> bool:
    """Whether the network adds a constant anywhere: a Linear/Conv bias, a norm layer's affine
    shift or BatchNorm's running mean. LEWC is exact only without (and without norm layers)."""
    return any(
        isinstance(getattr(m, attr, None), torch.Tensor)
        for m in model.modules()
        for attr in ("bias", "running_mean")
    )


def has_norm(model: nn.Module) -> bool:
    """Whether the network has a normalisation layer (which breaks LEWC's exponents)."""
    norms = (
        nn.BatchNorm1d,
        nn.BatchNorm2d,
        nn.BatchNorm3d,
        nn.SyncBatchNorm,
        nn.LayerNorm,
        nn.GroupNorm,
        nn.InstanceNorm1d,
        nn.InstanceNorm2d,
        nn.InstanceNorm3d,
    )
    return any(isinstance(m, norms) for m in model.modules())


def apply_weight(module: nn.Module, weight: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """W z without bias, with ``module``'s geometry (Linear, or Conv stride/padding/groups).

    ``z`` is features first, as the analysis holds it: (n, d) or, for a Linear on tokens,
    (n, d, *positions); the result keeps that layout."""
    if isinstance(module, nn.Linear):
        if z.dim() > 2:
            return F.linear(z.movedim(1, -1), weight).movedim(-1, 1)
        return F.linear(z, weight)
    return module._conv_forward(z, weight, None)


def unfolded_sq_norm(module: nn.Module, d: torch.Tensor) -> torch.Tensor:
    """‖H‖_F² of the matrix the weight multiplies: d itself for a Linear, the unfolded (im2col)
    patches of d for a Conv, computed as a convolution of d² with an all-ones kernel."""
    if isinstance(module, nn.Linear):
        return to_stat(d).pow(2).sum()
    if module.padding_mode != "zeros":
        d = F.pad(d, module._reversed_padding_repeated_twice, mode=module.padding_mode)
        padding: Any = 0
    else:
        padding = module.padding
    spatial = d.dim() - 2
    conv = (F.conv1d, F.conv2d, F.conv3d)[spatial - 1]
    ones = torch.ones((1, d.shape[1], *module.kernel_size), dtype=d.dtype, device=d.device)
    return to_stat(conv(d * d, ones, None, module.stride, padding, module.dilation)).sum()


def activation_function(module: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """σ of an activation module as a plain function: it bypasses the module's hooks (so our
    recorders do not see these extra calls) and never works in place."""
    if getattr(module, "inplace", False):
        module = copy.copy(module)
        module.inplace = False
    return module.forward


def weight_distance(w_a: torch.Tensor, w_b: torch.Tensor, rows: int = 1024) -> float:
    """‖W_A − W_B‖_F in float64, a block of rows at a time (no full-size float64 copy)."""
    total = 0.0
    for start in range(0, w_a.shape[0], rows):
        diff = to_stat(w_a[start : start + rows] - w_b[start : start + rows])
        total += float((diff * diff).sum())
    return math.sqrt(total)
