"""Orthogonal activation matching: Procrustes on features for orthogonal groups, activation
matching for the rest.

The data-driven counterpart of :mod:`lmc.perm.methods.orthogonal_weight_matching`. On a canonical
pre-LayerNorm transformer (:mod:`lmc.perm.symmetries.canonical_form`) the residual stream admits any
orthogonal map ``Q``; this finds the one that brings B's stream features closest to A's,

    Q = argmin_Q  E ‖z_A − Q z_B‖²  =  argmax_Q  tr(Qᵀ E[z_A z_Bᵀ])  =  U Vᵀ,

from the SVD ``U S Vᵀ`` of the uncentred cross-moment ``Σ z_A z_Bᵀ`` (rows: A's units) of the
features activation matching reads for that group (the stream as the layers that read it see
it: every reader's input, pooled over examples and tokens;
:mod:`lmc.perm.methods.activation_matching`). Where the features never visit a direction, as a
canonical stream never visits the all-ones one, the rotation there is taken from the weights
(:func:`procrustes_on_features`). Correlation would divide each unit by its spread, which no
rotation respects, so the stream uses the raw moment whatever ``statistic`` says. Every other group
(MLP units, heads and the dims within them) is matched as activation matching matches it, on the
cross-correlation (or ``statistic="covariance"``). One pass over the inputs collects both; no
group's answer depends on another's (a model's features do not change under its own symmetries), so
there is no descent: one Procrustes per orthogonal group and one assignment per other group.

A known orthogonal stream map combined with permutations of MLP units, heads and within-head
dims is recovered exactly (the aligned B equals A to rounding; tests/perm).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from lmc.config import LmcError

from ..symmetries.alignment_map import Alignment
from ..symmetries.symmetry_spec import SymmetrySpec
from ..symmetries.transforms import Orthogonal, Permutation, Transform
from .activation_matching import (
    assign_groups,
    check_statistic,
    feature_settings,
    feature_statistics,
)
from .orthogonal_weight_matching import (
    check_orthogonal_groups,
    cross_product,
    default_orthogonal_groups,
    distances_from_permutation,
    procrustes,
)
from .registry import AlignJob, AlignmentMethod, MethodOutput, register_method


@dataclass(frozen=True, eq=False)
class OrthogonalActivationResult:
    """What :func:`orthogonal_activation_matching` returns: ``alignment`` (apply it to B),
    ``orthogonal_groups`` (solved by Procrustes), ``examples`` seen, and per group the traced
    nodes read as its features (``points``)."""

    alignment: Alignment
    orthogonal_groups: tuple[str, ...]
    examples: int
    points: dict[str, tuple[str, ...]]


#: Singular values of the features' cross-moment at most this fraction of the largest are
#: directions the features never visit (a canonical stream is centred: the all-ones direction)
RANK_TOL = 1e-9


def procrustes_on_features(
    cross: torch.Tensor, weight_cross: Callable[[], torch.Tensor] | None = None
) -> torch.Tensor:
    """The orthogonal ``Q`` maximising ``tr(Qᵀ cross)`` (``U Vᵀ`` from the SVD of ``cross``).
    Where ``cross`` is rank-deficient (directions no feature visits: singular values at most
    ``RANK_TOL`` of the largest) any rotation between the two null spaces ties; the one
    maximising the weights' ``tr(Qᵀ weight_cross())`` is taken (Procrustes on the null spaces),
    so the weights along those directions match too (``weight_cross`` is called only then)."""
    u, s, vh = torch.linalg.svd(cross.detach().to(torch.float64))
    q = u @ vh
    null = s <= RANK_TOL * s[0] if s.numel() and s[0] > 0 else torch.ones_like(s, dtype=torch.bool)
    if weight_cross is None or not bool(null.any()):
        return q
    u0, v0 = u[:, null], vh[null].T
    r = procrustes(u0.T @ weight_cross().to(torch.float64) @ v0)
    return u[:, ~null] @ vh[~null] + u0 @ r @ v0.T


def orthogonal_activation_matching(
    spec: SymmetrySpec,
    model_a: nn.Module,
    model_b: nn.Module,
    inputs: torch.Tensor | Iterable[Any],
    *,
    orthogonal_groups: Iterable[str] | None = None,
    batch_size: int = 256,
    statistic: str = "correlation",
    quiet: bool = True,
) -> OrthogonalActivationResult:
    """Align B's canonical transformer to A's from their features on ``inputs`` (module
    docstring). ``spec``: the :class:`SymmetrySpec` of the canonical model;
    ``orthogonal_groups``: default
    :func:`lmc.perm.symmetries.symmetry_spec.default_orthogonal_groups` (the residual stream);
    ``statistic``: what the permuted groups are matched on (``correlation`` or ``covariance``).
    ``result.alignment.apply(spec, state_b)`` has B in A's coordinates."""
    if not isinstance(spec, SymmetrySpec):
        raise LmcError(
            "orthogonal activation matching needs a SymmetrySpec (lmc.perm.symmetry_spec)"
        )
    check_statistic(statistic)
    orth = list(default_orthogonal_groups(spec) if orthogonal_groups is None else orthogonal_groups)
    check_orthogonal_groups(spec, orth)
    features = feature_statistics(
        spec.spec, model_a, model_b, inputs, batch_size=batch_size, quiet=quiet
    )
    matrices = {g: acc.finalize(statistic) for g, acc in features.stats.items() if g not in orth}
    perm = assign_groups(spec.spec, matrices, skip=orth)
    transforms: dict[str, Transform] = {g: Permutation(p) for g, p in perm.items()}

    @functools.cache
    def permuted_b() -> dict[str, torch.Tensor]:
        """B with the permutations found (orthogonal groups still the identity), made only
        when a group's features leave directions to the weights' tie-break."""
        return Alignment(dict(transforms)).apply(spec, model_b.state_dict())

    for g in orth:
        acc = features.stats.get(g)
        if acc is None:
            warnings.warn(
                f"lmc.perm: no traced layer reads group {g!r}; orthogonal activation matching "
                "leaves it as the identity",
                stacklevel=2,
            )
            continue
        q = procrustes_on_features(
            acc.cross.cpu(), lambda g=g: cross_product(spec, g, model_a.state_dict(), permuted_b())
        )
        transforms[g] = Orthogonal(torch.zeros(1, dtype=torch.long), q[None])
    return OrthogonalActivationResult(
        alignment=Alignment(transforms),
        orthogonal_groups=tuple(orth),
        examples=features.examples,
        points={g: tuple(p[0] for p in pts) for g, pts in features.points.items()},
    )


# ---------------------------------------------------------------------------------------------
# the method's record: ``orthogonal-activation``


def _align(
    job: AlignJob, *, batch_size: int, statistic: str, max_examples: int | None
) -> MethodOutput:
    data = job.inputs if max_examples is None else job.inputs[:max_examples]
    result = orthogonal_activation_matching(
        job.symmetry, job.model_a, job.model_b, data, batch_size=batch_size,
        statistic=statistic, quiet=job.quiet,
    )  # fmt: skip
    extras = {
        "examples": result.examples,
        "orthogonal_groups": list(result.orthogonal_groups),
        "distance_from_permutation": distances_from_permutation(
            result.alignment, result.orthogonal_groups
        ),
    }
    return MethodOutput(result.alignment, extras)


METHOD = register_method(
    AlignmentMethod(
        "orthogonal-activation",
        _align,
        "orthogonal activation matching of pre-LN transformers: in the canonical form, the "
        "orthogonal map of the residual stream closest on training examples' features "
        "(Procrustes) and activation matching of MLP units, heads and head dims",
        settings=feature_settings(
            "what MLP units, heads and head dims are matched on: the cross-correlation or "
            "the cross-covariance (the stream always takes the uncentred cross-moment)"
        ),
        needs_data=True,
        canonical=True,
        order=70,
        summary="the same symmetries found from training examples' features: Procrustes on "
        "the stream, activation matching for the rest",
    )
)


__all__ = [
    "OrthogonalActivationResult",
    "orthogonal_activation_matching",
    "procrustes_on_features",
]
