"""``lmc.perm.align``: the one entry point other verbs call to permute B onto A."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from lmc.config import LmcError

from .activation_match import activation_matching
from .ops import (
    Perm,
    apply_permutation,
    identity_permutation,
    matching_objective,
    moved_fraction,
    random_permutation,
)
from .spec import PermutationSpec
from .ste import ste_matching
from .trace import spec_from_model
from .weight_match import weight_matching

METHODS = ("weight", "activation", "ste", "random", "none")

# settings each method accepts (besides ``spec``, a hand-written PermutationSpec)
SETTINGS: dict[str, dict[str, Any]] = {
    "weight": {"max_iter": 100, "tol": 1e-4},
    "activation": {"batch_size": 256, "statistic": "correlation", "max_examples": None},
    "ste": {
        "steps": 200,
        "lr": 1e-3,
        "batch_size": 128,
        "holdout": None,
        "max_iter": 100,
        "tol": 1e-4,
    },
    "random": {},
    "none": {},
}


@dataclass
class AlignResult:
    """What :func:`align` returns.

    ``perm``: group -> int64 index tensor, to apply to B (new unit i = old unit p[i]);
    ``state_dict``: B's full state (parameters and buffers) with ``perm`` applied;
    ``spec``: the permutation spec used; ``info``: ``method``, ``seed``, ``objective_before``
    and ``objective_after`` (Σ⟨θ_A, π(θ_B)⟩ at the identity and at ``perm``),
    ``moved_fraction`` (group -> fraction of units moved), ``seconds``, ``settings`` and
    method-specific extras.
    """

    perm: dict[str, torch.Tensor]
    state_dict: dict[str, torch.Tensor]
    spec: PermutationSpec
    info: dict[str, Any] = field(default_factory=dict)


def check_same_architecture(
    state_a: Mapping[str, torch.Tensor], state_b: Mapping[str, torch.Tensor]
) -> None:
    """``LmcError`` naming the first tensor whose name or shape differs between A and B."""
    for name, tensor in state_a.items():
        if name not in state_b:
            raise LmcError(
                f"models differ: model B has no tensor {name!r}; align two models of "
                "one architecture"
            )
        if tuple(tensor.shape) != tuple(state_b[name].shape):
            raise LmcError(
                f"models differ: {name!r} has shape {list(tensor.shape)} in A but "
                f"{list(state_b[name].shape)} in B; align two models of one architecture"
            )
    extra = [name for name in state_b if name not in state_a]
    if extra:
        raise LmcError(
            f"models differ: model A has no tensor {extra[0]!r}; align two models of "
            "one architecture"
        )


def _settings(method: str, given: dict[str, Any]) -> dict[str, Any]:
    allowed = SETTINGS[method]
    unknown = [k for k in given if k not in allowed]
    if unknown:
        choices = ", ".join(sorted(allowed)) or "none"
        raise LmcError(f"method {method!r} has no setting {unknown[0]!r} (its settings: {choices})")
    return {**allowed, **given}


def align(
    method: str,
    model_a: nn.Module,
    model_b: nn.Module,
    *,
    inputs: torch.Tensor,
    labels: torch.Tensor | None = None,
    seed: int = 0,
    quiet: bool = True,
    spec: PermutationSpec | None = None,
    **settings: Any,
) -> AlignResult:
    """Permute ``model_b``'s units to match ``model_a`` with ``method``.

    ``method``: ``weight`` (weight matching; settings ``max_iter``, ``tol``), ``activation``
    (settings ``batch_size``, ``statistic`` = correlation|covariance, ``max_examples``),
    ``ste`` (settings ``steps``, ``lr``, ``batch_size``, ``holdout``, ``max_iter``, ``tol``; needs
    ``labels``), ``random`` (a uniformly random valid permutation from ``seed``) or ``none``
    (the identity). ``inputs``: training inputs; their first two rows are the example input
    for deriving the spec from ``model_a`` (unless ``spec`` is given). Neither model is
    modified. Models of different architectures raise ``LmcError`` naming the first
    mismatching tensor.
    """
    if method not in METHODS:
        raise LmcError(f"unknown alignment method {method!r}: choose one of {', '.join(METHODS)}")
    options = _settings(method, settings)
    state_a = model_a.state_dict()
    state_b = model_b.state_dict()
    check_same_architecture(state_a, state_b)
    if not isinstance(inputs, torch.Tensor) or inputs.shape[0] < 1:
        raise LmcError("align needs a non-empty tensor of inputs (the example input for tracing)")
    device = next((p.device for p in model_a.parameters()), torch.device("cpu"))
    start = time.perf_counter()
    if spec is None:
        spec = spec_from_model(model_a, inputs[:2].to(device))
    extras: dict[str, Any] = {}
    if method == "weight":
        perm, wm_info = weight_matching(
            spec,
            state_a,
            state_b,
            seed=seed,
            max_iter=options["max_iter"],
            tol=options["tol"],
            return_info=True,
            quiet=quiet,
        )
        extras.update(
            passes=wm_info["passes"],
            assignments=wm_info["assignments"],
            converged=wm_info["converged"],
            objective_per_pass=wm_info["objective_per_pass"],
        )
    elif method == "activation":
        data = inputs if options["max_examples"] is None else inputs[: options["max_examples"]]
        perm, act_info = activation_matching(
            spec,
            model_a,
            model_b,
            data,
            batch_size=options["batch_size"],
            method=options["statistic"],
            quiet=quiet,
            return_info=True,
        )
        extras.update(examples=act_info["examples"])
    elif method == "ste":
        if labels is None:
            raise LmcError("method 'ste' needs labels: it minimises the midpoint's training loss")
        perm, ste_info = ste_matching(
            spec,
            model_a,
            model_b,
            inputs,
            labels,
            steps=options["steps"],
            lr=options["lr"],
            batch_size=options["batch_size"],
            seed=seed,
            holdout=options["holdout"],
            max_iter=options["max_iter"],
            tol=options["tol"],
            quiet=quiet,
            return_info=True,
        )
        extras.update({f"ste_{k}": v for k, v in ste_info.items() if k != "train_losses"})
        extras["ste_train_losses"] = ste_info["train_losses"]
    elif method == "random":
        perm = random_permutation(spec, seed)
    else:
        perm = identity_permutation(spec)
    seconds = time.perf_counter() - start
    state = apply_permutation(spec, perm, state_b)
    info: dict[str, Any] = {
        "method": method,
        "seed": seed,
        "settings": {k: v for k, v in options.items()},
        "objective_before": matching_objective(spec, state_a, state_b),
        "objective_after": matching_objective(spec, state_a, state_b, perm),
        "moved_fraction": moved_fraction(perm),
        "group_sizes": spec.group_sizes,
        "seconds": seconds,
        **extras,
    }
    return AlignResult(perm=perm, state_dict=state, spec=spec, info=info)


__all__ = ["METHODS", "SETTINGS", "AlignResult", "Perm", "align", "check_same_architecture"]
