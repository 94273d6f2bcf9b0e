"""Seeded weight initialisation that draws from an explicit generator."""

from __future__ import annotations

import math

import torch
from torch import nn


@torch.no_grad()
def initialize(model: nn.Module, seed: int) -> nn.Module:
    """Re-initialise every Linear/Conv with PyTorch's default scheme, from ``seed`` alone.

    Weights: Kaiming-uniform with a = sqrt(5) (PyTorch's default); biases: U(-1/sqrt(fan_in),
    1/sqrt(fan_in)). Norm layers get weight 1, bias 0 and fresh running statistics. The global RNG
    is not touched, so the same seed gives the same bits whatever ran before.
    """
    gen = torch.Generator().manual_seed(int(seed))
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)):
            weight = torch.empty(module.weight.shape, dtype=module.weight.dtype)
            nn.init.kaiming_uniform_(weight, a=math.sqrt(5), generator=gen)
            module.weight.copy_(weight)
            if module.bias is not None:
                fan_in = module.weight[0].numel()
                bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
                bias = torch.empty(module.bias.shape, dtype=module.bias.dtype)
                bias.uniform_(-bound, bound, generator=gen)
                module.bias.copy_(bias)
        elif isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm, nn.GroupNorm)):
            if getattr(module, "weight", None) is not None:
                module.weight.fill_(1.0)
            if getattr(module, "bias", None) is not None:
                module.bias.zero_()
            if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d)):
                module.reset_running_stats()
    return model
