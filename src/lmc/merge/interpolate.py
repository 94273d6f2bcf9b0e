"""Interpolating and averaging whole state dicts.

Convention (docs/science.md): theta(lam) = (1 - lam) * theta_A + lam * theta_B, so ``lam = 0`` is A
and ``lam = 1`` is B. Every floating-point entry of the state dict (parameters *and* floating
buffers such as BatchNorm running statistics) is interpolated; integer entries
(``num_batches_tracked``) are taken from A. The result has A's dtypes and devices. Every
function first checks the two states with :func:`lmc.models.compare.check_same_architecture`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from lmc.config import LmcError, check_lambda
from lmc.models.compare import check_same_architecture

#: A model's state: tensor name -> tensor (``model.state_dict()``).
StateDict = dict[str, torch.Tensor]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _check_lambda(lam: float) -> float:
    """λ as a float in [0, 1] (numpy and 0-d tensor numbers accepted)."""
    if isinstance(lam, torch.Tensor) and lam.numel() == 1:
        lam = lam.item()
    if hasattr(lam, "item") and not isinstance(lam, (int, float)):
        lam = lam.item()  # numpy scalars
    return check_lambda(lam)


def _mix(a: torch.Tensor, b: torch.Tensor, lam: float) -> torch.Tensor:
    """(1 - lam) * a + lam * b in a's dtype (half precision is computed in float32)."""
    b = b.to(device=a.device)
    if a.dtype in _LOW_PRECISION:
        out = (1.0 - lam) * a.float() + lam * b.float()
        return out.to(a.dtype)
    return torch.add(a * (1.0 - lam), b.to(a.dtype), alpha=lam)


@torch.no_grad()
def lerp(
    state_a: Mapping[str, torch.Tensor], state_b: Mapping[str, torch.Tensor], lam: float
) -> StateDict:
    """The state dict theta(lam) = (1 - lam) * theta_A + lam * theta_B.

    - floating entries (parameters and floating buffers) are interpolated; ``lam`` must lie in
      [0, 1] (``LmcError`` otherwise: the path runs from A to B);
    - integer and boolean entries (e.g. ``num_batches_tracked``) are not interpolated: A's for
      ``lam < 1``, B's at ``lam == 1`` (as on a curve, :mod:`lmc.merge.curves`);
    - ``lam == 0`` returns a copy of A and ``lam == 1`` a copy of B (floating entries cast to
      A's dtype), bit for bit;
    - names and shapes must agree: ``LmcError`` names the first mismatch.

    The inputs are not modified; the output never shares storage with them.
    """
    lam = _check_lambda(lam)
    check_same_architecture(state_a, state_b, purpose="interpolation")
    out: StateDict = {}
    for key, a in state_a.items():
        b = state_b[key]
        if lam == 1.0 and not a.is_floating_point():
            out[key] = b.detach().to(device=a.device, dtype=a.dtype, copy=True)
        elif not a.is_floating_point() or lam == 0.0:
            out[key] = a.detach().clone()
        elif lam == 1.0:
            out[key] = b.detach().to(device=a.device, dtype=a.dtype, copy=True)
        else:
            out[key] = _mix(a.detach(), b.detach(), lam)
    return out


@torch.no_grad()
def lerp_into(
    dest: nn.Module | Mapping[str, torch.Tensor],
    state_a: Mapping[str, torch.Tensor],
    state_b: Mapping[str, torch.Tensor],
    lam: float,
) -> None:
    """Write theta(lam) into ``dest`` in place (a module's own tensors, or a state dict's).

    The same values as :func:`lerp` (bit for bit, including the exact endpoints) without
    allocating a new state: for loops over lambda that reuse one working model. ``dest`` must
    have the same names and shapes.
    """
    lam = _check_lambda(lam)
    check_same_architecture(state_a, state_b, purpose="interpolation")
    target = dest.state_dict(keep_vars=True) if isinstance(dest, nn.Module) else dest
    check_same_architecture(
        state_a, target, names=("A", "the destination"), purpose="interpolation"
    )
    for key, a in state_a.items():
        d = target[key].data if isinstance(target[key], nn.Parameter) else target[key]
        a = a.detach().to(d.device)
        b = state_b[key].detach().to(d.device)
        if lam == 1.0:
            d.copy_(b)
        elif not a.is_floating_point() or lam == 0.0:
            d.copy_(a)
        elif a.dtype in _LOW_PRECISION or d.dtype != a.dtype:
            d.copy_(_mix(a, b, lam))
        else:
            torch.mul(a, 1.0 - lam, out=d)
            d.add_(b.to(a.dtype), alpha=lam)


@torch.no_grad()
def lerp_stack(
    state_a: Mapping[str, torch.Tensor],
    state_b: Mapping[str, torch.Tensor],
    lambdas: Sequence[float],
) -> StateDict:
    """theta(lam) for every ``lam`` in ``lambdas``, stacked on a new leading axis of size K.

    Entry ``k`` of every floating tensor is ``(1 - lambdas[k]) * a + lambdas[k] * b`` (the same
    formula as :func:`lerp`); integer entries are A's, expanded (no copy), B's in the entries
    where ``lam == 1`` when they differ (as :func:`lerp`). Used to evaluate many
    points of a path in one batched forward (``torch.func.functional_call`` + ``torch.vmap``).
    """
    lams = [_check_lambda(v) for v in lambdas]
    check_same_architecture(state_a, state_b, purpose="interpolation")
    out: StateDict = {}
    for key, a in state_a.items():
        a = a.detach()
        if not a.is_floating_point():
            b = state_b[key].detach().to(device=a.device, dtype=a.dtype)
            out[key] = a.unsqueeze(0).expand(len(lams), *a.shape)
            if 1.0 in lams and not torch.equal(a, b):
                out[key] = torch.stack([b if lam == 1.0 else a for lam in lams])
            continue
        b = state_b[key].detach().to(device=a.device)
        work = torch.float32 if a.dtype in _LOW_PRECISION else a.dtype
        lam = torch.tensor(lams, dtype=work, device=a.device).reshape(-1, *([1] * a.dim()))
        # Two passes over the K-fold output and no K-fold temporaries: (1 - lam) * a, then
        # += lam * b in place.
        stacked = torch.empty((len(lams), *a.shape), dtype=work, device=a.device)
        torch.mul(1.0 - lam, a.to(work), out=stacked)
        stacked.addcmul_(lam, b.to(work))
        out[key] = stacked.to(a.dtype)
    return out


@torch.no_grad()
def average(
    states: Sequence[Mapping[str, torch.Tensor]], weights: Sequence[float] | None = None
) -> StateDict:
    """The weighted average sum_i w_i theta_i / sum_i w_i of N state dicts.

    ``weights`` default to equal; they must be finite, non-negative and not all zero. Floating
    entries are accumulated in float64 and returned in the first state's dtype; integer entries
    come from the first state. Names and shapes must agree (``LmcError`` names the first
    mismatch, counting models from 0). ``average([a, b], [1 - lam, lam])`` equals
    ``lerp(a, b, lam)`` up to rounding.
    """
    states = list(states)
    if not states:
        raise LmcError("average needs at least one state dict")
    if weights is None:
        weights = [1.0] * len(states)
    weights = [float(w) for w in weights]
    if len(weights) != len(states):
        raise LmcError(f"average got {len(states)} state dicts but {len(weights)} weights")
    if any(not math.isfinite(w) or w < 0 for w in weights) or sum(weights) <= 0:
        raise LmcError(f"average weights must be finite, >= 0 and not all 0, got {weights}")
    first = states[0]
    for i, other in enumerate(states[1:], start=1):
        check_same_architecture(first, other, names=("model 0", f"model {i}"), purpose="averaging")
    total = sum(weights)
    out: StateDict = {}
    for key, t0 in first.items():
        if not t0.is_floating_point():
            out[key] = t0.detach().clone()
            continue
        acc = torch.zeros(t0.shape, dtype=torch.float64, device=t0.device)
        for w, state in zip(weights, states):
            if w != 0.0:
                acc.add_(state[key].detach().to(device=t0.device, dtype=torch.float64), alpha=w)
        out[key] = (acc / total).to(t0.dtype)
    return out
