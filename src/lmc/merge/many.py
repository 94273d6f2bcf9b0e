"""Merging N models, optionally after aligning each one to a reference by weight matching."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from lmc.config import LmcError

from .interpolate import StateDict, average

ALIGN_CHOICES = (None, "none", "weight")


def _state_of(obj: Any) -> StateDict:
    if isinstance(obj, nn.Module):
        return {k: v.detach() for k, v in obj.state_dict().items()}
    if isinstance(obj, Mapping):
        return dict(obj)
    raise LmcError(f"merge_many takes nn.Module objects or state dicts, got {type(obj).__name__}")


def merge_many(
    models_or_states: Sequence[nn.Module | Mapping[str, torch.Tensor]],
    *,
    align: str | None = None,
    reference: int = 0,
    weights: Sequence[float] | None = None,
    model: nn.Module | None = None,
    example_input: torch.Tensor | None = None,
    spec: Any = None,
    seed: int = 0,
) -> StateDict:
    """Average N models of one architecture, optionally aligned to one reference first.

    Args:
        models_or_states: ``nn.Module`` objects or state dicts (mixed is fine).
        align: ``None``/``"none"``: plain (weighted) averaging. ``"weight"``: every model other
            than the reference is permuted onto the reference by
            ``lmc.perm.weight_matching(spec, state_ref, state_i, seed).perm`` and
            ``lmc.perm.apply_permutation`` before averaging (Git Re-Basin's merge-many, anchored
            on one model rather than iterated).
        reference: index of the reference model (kept as it is; the others move to it).
        weights: averaging weights (default equal), see :func:`lmc.merge.average`.
        model, example_input, spec: how to get the permutation spec when aligning: pass
            ``spec`` directly, or ``example_input`` (one batch) and either ``model`` or module
            objects in ``models_or_states`` (the reference's module is then traced with
            ``lmc.perm.spec_from_model``).
        seed: seed of weight matching's random layer order.

    Returns the merged state dict. BatchNorm running statistics of the result are averages and
    generally wrong: reset them with :func:`lmc.merge.reset_batchnorm` before evaluating.
    """
    items = list(models_or_states)
    if not items:
        raise LmcError("merge_many needs at least one model")
    if not 0 <= reference < len(items):
        raise LmcError(f"reference index {reference} is out of range for {len(items)} models")
    if align not in ALIGN_CHOICES:
        raise LmcError(f"unknown alignment {align!r} for merge_many: use None or 'weight'")
    states = [_state_of(obj) for obj in items]
    if weights is not None and len(weights) != len(states):
        raise LmcError(f"merge_many got {len(states)} models but {len(weights)} weights")
    if align == "weight" and len(states) > 1:
        from lmc import perm as lmc_perm  # imported lazily: lmc.perm sits before lmc.merge

        if spec is None:
            module = model
            if module is None and isinstance(items[reference], nn.Module):
                module = items[reference]
            if module is None:
                module = next((obj for obj in items if isinstance(obj, nn.Module)), None)
            if module is None or example_input is None:
                raise LmcError(
                    "merge_many(align='weight') needs a permutation spec: pass spec=, or "
                    "example_input= with model= (or nn.Module objects)"
                )
            spec = lmc_perm.spec_from_model(module, example_input)
        ref_state = states[reference]
        for i, state in enumerate(states):
            if i == reference:
                continue
            result = lmc_perm.weight_matching(spec, ref_state, state, seed=seed)
            states[i] = lmc_perm.apply_permutation(spec, result.perm, state)
    # Average with the reference first so that integer buffers and dtypes come from it.
    order = [reference] + [i for i in range(len(states)) if i != reference]
    w = None if weights is None else [float(weights[i]) for i in order]
    return average([states[i] for i in order], w)
