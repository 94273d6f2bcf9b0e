"""BatchNorm after interpolation: reset running statistics, or REPAIR (Jordan et al. 2022).

The running statistics of theta(lam) are the interpolated statistics of A and B, which are not
the statistics of theta(lam)'s own activations (and its activations' variance collapses towards
the middle of the path). Two fixes, both on *training* inputs:

- ``reset``: recompute every BatchNorm's running mean/variance as the cumulative average over
  batches (``momentum=None``) in train mode, without touching any parameter.
- ``repair``: set each BatchNorm output channel's mean and std to the interpolation of the
  endpoints' ones, ``(1 - lam) * mu_A + lam * mu_B`` and ``(1 - lam) * sd_A + lam * sd_B``
  (measured on the same inputs, endpoints in eval mode), then reset. For a BatchNorm model this
  is done exactly by the BatchNorm's own affine: after a reset the normalised channel has mean
  0 and std 1 on the reset data, so the affine (weight, bias) := (sign(weight) * sd_target,
  mu_target) gives the target statistics. REPAIR for norm-free networks (inserting an affine at
  every pre-activation channel) is not implemented: :func:`repair` needs BatchNorm layers.

``bn_mode`` values: ``auto`` (``reset`` when the model has BatchNorm, ``none`` otherwise),
``reset``, ``repair``, ``none``. The resolved mode is recorded in every result.
"""

from __future__ import annotations

import torch
from torch import nn

from lmc.config import LmcError, progress
from lmc.models import eval_mode, module_device

#: What to do with BatchNorm statistics after interpolation: ``auto`` (``reset`` where the
#: model has BatchNorm, else ``none``), ``reset``, ``repair`` (Jordan et al. 2022) or ``none``.
BN_MODES = ("auto", "reset", "repair", "none")
_BatchNorm = nn.modules.batchnorm._BatchNorm


def batchnorm_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``(name, module)`` of every BatchNorm layer that tracks running statistics."""
    return [
        (name, m)
        for name, m in model.named_modules()
        if isinstance(m, _BatchNorm) and m.track_running_stats
    ]


def has_batchnorm(model: nn.Module) -> bool:
    """Whether ``model`` has a BatchNorm layer with running statistics."""
    return bool(batchnorm_modules(model))


def resolve_bn_mode(model: nn.Module, mode: str) -> str:
    """Turn ``mode`` into what is actually done to ``model``: ``reset``, ``repair`` or ``none``.

    ``auto`` is ``reset`` for a model with BatchNorm and ``none`` otherwise; ``reset`` on a
    model without BatchNorm has nothing to do and resolves to ``none``; ``repair`` on such a
    model is an ``LmcError``.
    """
    if mode not in BN_MODES:
        raise LmcError(f"unknown BatchNorm mode {mode!r}: choose one of {', '.join(BN_MODES)}")
    has_bn = has_batchnorm(model)
    if mode == "auto":
        return "reset" if has_bn else "none"
    if mode == "reset" and not has_bn:
        return "none"
    if mode == "repair" and not has_bn:
        raise LmcError(
            "REPAIR is implemented for models with BatchNorm only and this model has none; "
            "use --bn none (nothing to repair after LayerNorm or without norm)"
        )
    return mode


def _input_batches(
    inputs: torch.Tensor,
    batch_size: int,
    num_batches: int | None,
    seed: int,
    generator: torch.Generator | None,
) -> list[torch.Tensor]:
    """Index batches for statistics passes.

    ``num_batches=None``: every example, in order, in batches of ``batch_size``; the last partial
    batch is dropped when at least one full batch exists (the cumulative average weighs every
    batch equally, so equal sizes make the running mean the exact mean over the used examples).
    Otherwise ``num_batches`` batches from one random order drawn from ``generator`` (or
    ``torch.Generator().manual_seed(seed)``), on the CPU.
    """
    n = len(inputs)
    if n == 0:
        raise LmcError("BatchNorm statistics need inputs, got an empty tensor")
    if batch_size < 2:
        raise LmcError(f"BatchNorm statistics need batches of at least 2, got {batch_size}")
    if num_batches is None:
        order = torch.arange(n)
    else:
        if num_batches < 1:
            raise LmcError(f"num_batches must be at least 1, got {num_batches}")
        gen = generator if generator is not None else torch.Generator().manual_seed(seed)
        order = torch.randperm(n, generator=gen)
    stop = n - n % batch_size if n >= batch_size else n
    out = [order[s : s + batch_size] for s in range(0, stop, batch_size)]
    if num_batches is not None:
        out = out[:num_batches]
    return out


def _run_batches(
    model: nn.Module,
    inputs: torch.Tensor,
    index_batches: list[torch.Tensor],
    quiet: bool,
    desc: str,
) -> None:
    """Forward every batch of ``inputs`` through ``model`` (outputs discarded)."""
    device = module_device(model)
    for idx in progress(index_batches, quiet=quiet, desc=desc):
        model(inputs[idx.to(inputs.device)].to(device, non_blocking=True))


@torch.no_grad()
def reset_batchnorm(
    model: nn.Module,
    inputs: torch.Tensor,
    *,
    batch_size: int = 256,
    num_batches: int | None = None,
    seed: int = 0,
    generator: torch.Generator | None = None,
    quiet: bool = True,
) -> nn.Module:
    """Recompute the running statistics of every BatchNorm layer of ``model`` on ``inputs``.

    Each BatchNorm's statistics are cleared and re-estimated as the cumulative average
    (``momentum=None``) over the batches of :func:`_input_batches` (all of ``inputs`` in order
    by default, or ``num_batches`` random batches drawn from ``seed``/``generator``), with the
    BatchNorm layers in train mode and every other module in eval mode (dropout off), under
    ``torch.no_grad``: no parameter changes. The running variance is then the mean of the
    batches' unbiased variances, as PyTorch defines it. Afterwards every module's train/eval
    mode and every BatchNorm's momentum are restored. ``inputs`` are training inputs of shape
    ``(N, ...)`` on any device (batches are moved to the model's device). Returns ``model``.
    """
    bns = batchnorm_modules(model)
    if not bns:
        return model
    batches = _input_batches(inputs, batch_size, num_batches, seed, generator)
    momenta = {m: m.momentum for _, m in bns}
    with eval_mode(model):
        try:
            for _, m in bns:
                m.reset_running_stats()
                m.momentum = None
                m.train()
            _run_batches(model, inputs, batches, quiet, "BatchNorm reset")
        finally:
            for m, momentum in momenta.items():
                m.momentum = momentum
    return model


@torch.no_grad()
def batchnorm_output_stats(
    model: nn.Module,
    inputs: torch.Tensor,
    *,
    batch_size: int = 256,
    num_batches: int | None = None,
    seed: int = 0,
    quiet: bool = True,
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per-channel mean and std (population, float64) of every BatchNorm layer's *output*.

    The model runs in eval mode (its own running statistics) on the same batches as
    :func:`reset_batchnorm` with the same arguments; channels are axis 1 and every other axis
    is averaged over. Sums are streamed in float64. Returns ``{bn_name: (mean, std)}``.
    """
    bns = batchnorm_modules(model)
    batches = _input_batches(inputs, batch_size, num_batches, seed, None)
    sums: dict[str, list] = {}

    def hook_for(name: str):
        def hook(_module, _inp, out):
            c = out.shape[1]
            z = out.detach().transpose(0, 1).reshape(c, -1).double()
            s = sums.setdefault(name, [0, 0.0, 0.0])
            s[0] += z.shape[1]
            s[1] = s[1] + z.sum(1)
            s[2] = s[2] + (z * z).sum(1)

        return hook

    handles = [m.register_forward_hook(hook_for(name)) for name, m in bns]
    try:
        with eval_mode(model):
            _run_batches(model, inputs, batches, quiet, "BatchNorm statistics")
    finally:
        for h in handles:
            h.remove()
    stats = {}
    for name, (count, s1, s2) in sums.items():
        mean = s1 / count
        var = (s2 / count - mean * mean).clamp_min(0.0)
        stats[name] = (mean, var.sqrt())
    return stats


@torch.no_grad()
def repair(
    model: nn.Module,
    model_a: nn.Module,
    model_b: nn.Module,
    lam: float,
    inputs: torch.Tensor,
    *,
    batch_size: int = 256,
    num_batches: int | None = None,
    seed: int = 0,
    stats_a: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None,
    stats_b: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None,
    quiet: bool = True,
) -> nn.Module:
    """REPAIR (Jordan et al. 2022) for the interpolated BatchNorm model ``model`` = theta(lam).

    Every BatchNorm output channel of ``model`` is given the mean
    ``(1 - lam) * mu_A + lam * mu_B`` and the std ``(1 - lam) * sd_A + lam * sd_B`` of the
    endpoints' same channel (see :func:`batchnorm_output_stats`; pass ``stats_a``/``stats_b`` to
    reuse them along a path): the BatchNorm affine becomes (weight, bias) :=
    (sign(weight) * sd_target, mu_target) (a zero weight counts as positive), then the running
    statistics are reset on ``inputs`` (:func:`reset_batchnorm`), which makes the normalised
    channel mean 0 / std 1 on those inputs. ``model`` is changed in place and returned.
    Needs BatchNorm layers with an affine (``LmcError`` otherwise).
    """
    bns = batchnorm_modules(model)
    if not bns:
        raise LmcError(
            "REPAIR is implemented for models with BatchNorm only and this model has none; "
            "use bn mode 'none'"
        )
    kw = dict(batch_size=batch_size, num_batches=num_batches, seed=seed, quiet=quiet)
    if stats_a is None:
        stats_a = batchnorm_output_stats(model_a, inputs, **kw)
    if stats_b is None:
        stats_b = batchnorm_output_stats(model_b, inputs, **kw)
    lam = float(lam)
    for name, m in bns:
        if name not in stats_a or name not in stats_b:
            raise LmcError(f"REPAIR: BatchNorm {name!r} is missing in an endpoint model")
        if not m.affine:
            raise LmcError(f"REPAIR needs BatchNorm layers with an affine; {name!r} has none")
        mean_a, sd_a = stats_a[name]
        mean_b, sd_b = stats_b[name]
        mean_t = (1.0 - lam) * mean_a + lam * mean_b
        sd_t = (1.0 - lam) * sd_a + lam * sd_b
        sign = torch.where(m.weight < 0, -1.0, 1.0).to(torch.float64)
        m.weight.copy_((sign * sd_t.to(sign.device)).to(m.weight.dtype))
        m.bias.copy_(mean_t.to(device=m.bias.device, dtype=m.bias.dtype))
    reset_batchnorm(
        model, inputs, batch_size=batch_size, num_batches=num_batches, seed=seed, quiet=quiet
    )
    return model
