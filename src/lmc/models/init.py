"""Seeded weight initialisation that draws from an explicit generator."""

from __future__ import annotations

import math

import torch
from torch import nn

NORM_TYPES = (nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm, nn.GroupNorm)


@torch.no_grad()
def normal_draw_(param: torch.Tensor, std: float, generator: torch.Generator | None) -> None:
    """Fill ``param`` in place with N(0, ``std``²) drawn from ``generator`` into a fresh CPU
    tensor of its shape and dtype (so the bits do not depend on the parameter's device)."""
    draw = torch.empty(param.shape, dtype=param.dtype)
    draw.normal_(0.0, std, generator=generator)
    param.copy_(draw)


@torch.no_grad()
def initialize(model: nn.Module, seed: int) -> nn.Module:
    """Re-initialise every Linear/Conv/Embedding with PyTorch's default scheme, from ``seed``.

    Weights: Kaiming-uniform with a = sqrt(5) (PyTorch's default); biases: U(-1/sqrt(fan_in),
    1/sqrt(fan_in)); Embedding weights: N(0, 1). Norm layers get weight 1, bias 0 and fresh
    running statistics. A parameter shared by two modules (a tied head) is drawn once, by the
    first module that holds it. Then every module with an ``lmc_init(generator)`` method (a
    transformer's class token and position embeddings, say) draws its own parameters, in
    module order, after the defaults (so it may override them). The global RNG is not touched,
    so the same seed gives the same bits whatever ran before: a run's initial weights are
    never stored, and :func:`lmc.analysis.retention.initial_state` rebuilds them this way.
    """
    gen = torch.Generator().manual_seed(int(seed))
    seen: set[int] = set()

    def fresh(param: torch.Tensor | None) -> bool:
        if param is None or id(param) in seen:
            return False
        seen.add(id(param))
        return True

    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)):
            if fresh(module.weight):
                weight = torch.empty(module.weight.shape, dtype=module.weight.dtype)
                nn.init.kaiming_uniform_(weight, a=math.sqrt(5), generator=gen)
                module.weight.copy_(weight)
            if fresh(module.bias):
                fan_in = module.weight[0].numel()
                bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
                bias = torch.empty(module.bias.shape, dtype=module.bias.dtype)
                bias.uniform_(-bound, bound, generator=gen)
                module.bias.copy_(bias)
        elif isinstance(module, nn.Embedding):
            if fresh(module.weight):
                normal_draw_(module.weight, 1.0, gen)
        elif isinstance(module, NORM_TYPES):
            if getattr(module, "weight", None) is not None:
                module.weight.fill_(1.0)
            if getattr(module, "bias", None) is not None:
                module.bias.zero_()
            if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d)):
                module.reset_running_stats()
    for module in model.modules():
        hook = getattr(module, "lmc_init", None)
        if callable(hook):
            hook(gen)
    return model
