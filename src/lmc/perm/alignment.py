"""``lmc.perm.align``: the one entry point other verbs call to permute B onto A."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import Any

import torch
from torch import nn

from lmc.config import LmcError, check_finite, check_labels
from lmc.models import module_device
from lmc.models.compare import check_same_architecture

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
from .weight_match import one_pass_matching, weight_matching

METHODS = ("weight", "activation", "ste", "random", "onepass", "none")

# settings each method accepts (besides ``spec``, a hand-written PermutationSpec)
SETTINGS: dict[str, dict[str, Any]] = {
    "weight": {"max_iter": 100, "tol": 1e-4, "init": "onepass", "restarts": 1, "solver": "auto"},
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
    "onepass": {},
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

    ``method``: ``weight`` (weight matching; settings ``max_iter``, ``tol``, ``init``
    (``onepass``, the default, or ``identity``), ``restarts`` and ``solver`` (``auto``, the
    default, ``scipy``, ``lapx`` or ``sparse``); ``info`` records the solver that ran),
    ``activation``
    (settings ``batch_size``, ``statistic`` = correlation|covariance, ``max_examples``),
    ``ste`` (settings ``steps``, ``lr``, ``batch_size``, ``holdout``, ``max_iter``, ``tol``; needs
    ``labels``), ``onepass`` (Git Re-Basin's greedy one-pass baseline, App. A.7:
    :func:`lmc.perm.one_pass_matching`), ``random`` (a uniformly random valid permutation
    from ``seed``) or ``none`` (the identity). ``inputs``: training inputs; their first two
    rows are the example input for deriving the spec from ``model_a`` (unless ``spec`` is
    given). Neither model is
    modified. Models of different architectures raise ``LmcError`` naming the first
    difference (:func:`lmc.models.compare.check_same_architecture`: a zoo option, a tensor's
    name or shape, a submodule's type).
    """
    if method not in METHODS:
        raise LmcError(f"unknown alignment method {method!r}: choose one of {', '.join(METHODS)}")
    options = _settings(method, settings)
    check_same_architecture(model_a, model_b, purpose="alignment")
    state_a = model_a.state_dict()
    state_b = model_b.state_dict()
    if not isinstance(inputs, torch.Tensor) or inputs.shape[0] < 1:
        raise LmcError("align needs a non-empty tensor of inputs (the example input for tracing)")
    check_finite("inputs", inputs)
    check_finite("model A's weights", state_a)
    check_finite("model B's weights", state_b)
    if labels is not None:
        check_labels("labels", labels)
    device = module_device(model_a)
    start = time.perf_counter()
    if spec is None:
        spec = spec_from_model(model_a, inputs[:2].to(device))
    extras: dict[str, Any] = {}
    if method == "weight":
        wm = weight_matching(
            spec,
            state_a,
            state_b,
            seed=seed,
            max_iter=options["max_iter"],
            tol=options["tol"],
            init=options["init"],
            restarts=options["restarts"],
            solver=options["solver"],
            quiet=quiet,
        )
        perm = wm.perm
        extras.update(
            solver=wm.solver,
            passes=wm.passes,
            assignments=wm.assignments,
            converged=wm.converged,
            objective_per_pass=list(wm.objective_per_pass),
        )
        if options["restarts"] > 1:
            extras.update(restart_objectives=list(wm.restart_objectives),
                          best_restart=wm.best_restart)  # fmt: skip
    elif method == "activation":
        data = inputs if options["max_examples"] is None else inputs[: options["max_examples"]]
        am = activation_matching(
            spec,
            model_a,
            model_b,
            data,
            batch_size=options["batch_size"],
            method=options["statistic"],
            quiet=quiet,
        )
        perm = am.perm
        extras.update(examples=am.examples)
    elif method == "ste":
        if labels is None:
            raise LmcError("method 'ste' needs labels: it minimises the midpoint's training loss")
        ste = ste_matching(
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
        )
        perm = ste.perm
        for f in fields(ste):
            if f.name != "perm":
                value = getattr(ste, f.name)
                extras[f"ste_{f.name}"] = list(value) if isinstance(value, tuple) else value
    elif method == "onepass":
        perm = one_pass_matching(spec, state_a, state_b).perm
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


__all__ = ["METHODS", "SETTINGS", "AlignResult", "Perm", "align"]
