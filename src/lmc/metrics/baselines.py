"""The random-direction baseline: is a low barrier connectivity, or merely a flat minimum?

``random_direction_state(A, B, seed)`` returns B' = A + ||theta_B - theta_A|| * u for a seeded
random unit direction u. Evaluating the path A -> B' (same length as A -> B, random direction)
shows how much the loss rises just by moving that far from A: if A -> B' stays as low as A -> B,
a low barrier says little about connectivity between A and B.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch

from lmc.config import LmcError
from lmc.merge.interpolate import StateDict
from lmc.models.compare import check_same_architecture

#: Buffers that are statistics of the data, not weights: never moved (``reset`` recomputes them).
STATISTIC_SUFFIXES = ("running_mean", "running_var", "num_batches_tracked")


def moved_entries(
    state: Mapping[str, torch.Tensor], parameter_names: Iterable[str] | None = None
) -> list[str]:
    """Names of the entries the baseline moves: ``parameter_names`` when given (e.g.
    ``[n for n, _ in model.named_parameters()]``), else every floating entry whose name does not
    end in a BatchNorm statistic (``running_mean``, ``running_var``)."""
    if parameter_names is not None:
        names = set(parameter_names)
        missing = names - set(state)
        if missing:
            raise LmcError(f"parameter {sorted(missing)[0]!r} is not in the state dict")
        return [k for k in state if k in names and state[k].is_floating_point()]
    return [
        k for k, v in state.items() if v.is_floating_point() and not k.endswith(STATISTIC_SUFFIXES)
    ]


@torch.no_grad()
def random_direction_state(
    state_a: Mapping[str, torch.Tensor],
    state_b: Mapping[str, torch.Tensor],
    seed: int,
    *,
    filter_normalize: bool = False,
    parameter_names: Iterable[str] | None = None,
) -> StateDict:
    """B' = A + ||theta_B - theta_A|| * u, with u a seeded random unit direction.

    - Moved entries: the float parameters (:func:`moved_entries`); BatchNorm running statistics
      and integer buffers are copied from A unchanged, so they do not fit B': recompute them
      with a BatchNorm reset, endpoints included
      (``evaluate_path(A, None, x, y, state_b=B', bn="auto", reset_endpoints=True, ...)``,
      as ``lmc interpolate --baseline random-direction`` does).
    - The distance ||theta_B - theta_A|| is the Euclidean norm over the moved entries, so
      ||theta_B' - theta_A|| equals it (up to float32 rounding).
    - u: i.i.d. standard normal entries drawn on the CPU in float32 from
      ``torch.Generator().manual_seed(seed)``, entry by entry in state-dict order, normalised to
      unit norm over all moved entries. Same seed, same direction, on every device.
    - ``filter_normalize=True`` (after Li et al. 2018, "Visualizing the loss landscape"): before
      the global normalisation each filter of the direction (each slice along axis 0 of a tensor
      with 2+ axes, i.e. a Linear row or a Conv output filter) is rescaled to the norm of A's same
      filter; a 1-D tensor (bias, norm weight) counts as one filter. The whole direction is then
      rescaled to the same total distance, so only the distribution of the step across filters
      changes.

    Returns a new state dict with A's dtypes and devices.
    """
    check_same_architecture(state_a, state_b)
    names = moved_entries(state_a, parameter_names)
    if not names:
        raise LmcError("the random-direction baseline found no float parameters to move")
    gen = torch.Generator().manual_seed(int(seed))
    direction: dict[str, torch.Tensor] = {}
    dist_sq = 0.0
    for k in names:
        a = state_a[k].detach()
        diff = state_b[k].detach().to(a.device, torch.float64) - a.double()
        dist_sq += float((diff * diff).sum())
        d = torch.randn(a.shape, generator=gen, dtype=torch.float32).double()
        if filter_normalize:
            a64 = a.double().cpu()
            rows = d.reshape(d.shape[0], -1) if d.dim() >= 2 else d.reshape(1, -1)
            ref = a64.reshape(a64.shape[0], -1) if d.dim() >= 2 else a64.reshape(1, -1)
            scale = ref.norm(dim=1, keepdim=True) / rows.norm(dim=1, keepdim=True).clamp_min(1e-30)
            d = (rows * scale).reshape(d.shape)
        direction[k] = d
    total = sum(float((d * d).sum()) for d in direction.values()) ** 0.5
    if total == 0.0:
        raise LmcError(
            "the random direction is zero (A's filters are all zero with filter_normalize)"
        )
    factor = dist_sq**0.5 / total
    out: StateDict = {k: v.detach().clone() for k, v in state_a.items()}
    for k, d in direction.items():
        a = state_a[k].detach()
        out[k] = (a.double() + factor * d.to(a.device)).to(a.dtype)
    return out
