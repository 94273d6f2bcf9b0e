"""Orthogonal weight matching: Procrustes for orthogonal groups, weight matching for the rest.

The objective is weight matching's, ``Σ ⟨θ_A, T(θ_B)⟩`` over every tensor with a transformed
axis, now over an :class:`~lmc.perm.symmetries.alignment_map.Alignment` ``T`` whose *orthogonal
groups* (by default every group not nested in heads that admits orthogonal maps: a canonical
transformer's residual stream, :mod:`lmc.perm.symmetries.canonical_form`) take any orthogonal ``Q``
and whose other groups take permutations.

Given everything else, one orthogonal group's best ``Q`` is the orthogonal Procrustes map: with
each member axis of A and of B (the others already transformed) moved first and flattened to
``(n, rest)``, ``⟨A, Q B⟩ = tr(Q B Aᵀ)``, maximised over orthogonal ``Q`` by ``Q = U Vᵀ`` from
the SVD ``U S Vᵀ = Σ A Bᵀ`` (summed over the group's axes; for an orthogonal map ``in`` and
``out`` axes transform alike). Given the orthogonal maps, the permutations are
:func:`lmc.perm.weight_matching` on B with the maps applied, over the spec without the
orthogonal groups. Coordinate descent alternates the two from the identity (the Procrustes
step first) until a round raises the objective by no more than ``tol`` × |objective|. The
first Procrustes step uses only the *anchor* tensors (those the group transforms on one axis
and nothing else transforms: embeddings, class and position tokens, the stream writers'
biases, the head), whose terms do not depend on the still unknown permutations, when they
determine ``Q`` (their cross product has full rank); a stream map combined with permuted units
is then found at once rather than through a local optimum of the joint descent.

Returns the alignment to apply to B (``result.alignment.apply(spec, state_b)`` has B's units
in A's coordinates). A known orthogonal stream map combined with permutations of the MLP
units, heads and within-head dims is recovered (the aligned B equals A to rounding).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch
from scipy.optimize import linear_sum_assignment

from lmc.config import LmcError

from ..symmetries.alignment_map import Alignment
from ..symmetries.symmetry_spec import SymmetrySpec, default_orthogonal_groups
from ..symmetries.transforms import Orthogonal, Permutation, Transform, kind_rank
from .registry import AlignJob, AlignmentMethod, MethodOutput, MethodSetting, register_method
from .weight_matching import weight_matching


@dataclass(frozen=True, eq=False)
class OrthogonalMatchResult:
    """What :func:`orthogonal_weight_matching` returns.

    ``alignment``: the transform of B (orthogonal groups: :class:`Orthogonal`, the others:
    :class:`Permutation`); ``orthogonal_groups``: the groups solved by Procrustes;
    ``objective_before`` / ``objective_after``: ``Σ ⟨θ_A, T(θ_B)⟩`` at the identity and at
    ``alignment``; ``objective_per_pass``: after each round; ``passes``; ``converged``
    (stopped by ``tol`` rather than ``max_iter``).
    """

    alignment: Alignment
    orthogonal_groups: tuple[str, ...]
    objective_before: float
    objective_after: float
    objective_per_pass: tuple[float, ...]
    passes: int
    converged: bool


def procrustes(cross: torch.Tensor) -> torch.Tensor:
    """The orthogonal ``Q`` maximising ``⟨Q, cross⟩ = tr(Qᵀ cross)``: ``U Vᵀ`` from the SVD
    ``cross = U S Vᵀ`` (float64)."""
    u, _, vh = torch.linalg.svd(cross.detach().to(torch.float64))
    return u @ vh


def distance_from_permutation(transform: Transform) -> float:
    """How far an orthogonal map is from the nearest permutation: ``‖Q − P‖_F / sqrt(2n)``
    with ``P`` the permutation maximising ``tr(Pᵀ Q)`` (a linear assignment on ``Q``). 0 for a
    permutation; for orthogonal ``Q``, ``‖Q − P‖² = 2n − 2 tr(PᵀQ)``, so the distance is
    ``sqrt(1 − tr(PᵀQ) / n)``: about 1 for a Haar-random rotation, at most ``sqrt(2)``."""
    q = transform.matrix()
    rows, cols = linear_sum_assignment(q.numpy(), maximize=True)
    n = q.shape[0]
    trace = float(q[rows, cols].sum())
    return float(max(0.0, 1.0 - trace / n) ** 0.5)


def distances_from_permutation(alignment: Alignment, groups: Iterable[str]) -> dict[str, float]:
    """:func:`distance_from_permutation` of the transform of each of ``groups`` in
    ``alignment`` (what the orthogonal methods report of their maps)."""
    return {g: distance_from_permutation(alignment[g]) for g in groups}


def _pieces(
    spec: SymmetrySpec, group: str, state: Mapping[str, torch.Tensor]
) -> Iterable[tuple[str, int, int, int, torch.Tensor]]:
    """``(name, axis, offset, segment index, tensor)`` for each segment of ``group``."""
    pspec = spec.spec
    for name, axis in pspec.groups.get(group, []):
        if name not in state:
            continue
        offset = 0
        for k, seg in enumerate(pspec[name][axis]):
            if seg.perm == group:
                yield name, axis, offset, k, state[name]
            offset += seg.extent


def cross_product(
    spec: SymmetrySpec,
    group: str,
    state_a: Mapping[str, torch.Tensor],
    state_b: Mapping[str, torch.Tensor],
    *,
    anchors_only: bool = False,
) -> torch.Tensor:
    """``Σ A Bᵀ`` (``n x n``, float64) over the group's axes, each moved first and flattened
    to ``(n, rest)`` (a unit's ``repeat`` indices go to the rest). ``anchors_only``: only the
    tensors with no other transformed axis (embeddings, class and position tokens, the
    writers' biases, the head), whose term does not depend on any other group's transform."""
    n = spec.group_sizes[group]
    total = torch.zeros(n, n, dtype=torch.float64)
    for name, axis, offset, k, a in _pieces(spec, group, state_a):
        if anchors_only and not _is_anchor(spec, name, axis):
            continue
        if spec.role(name, axis, k) == "norm":
            raise LmcError(
                f"{name!r} is an elementwise norm parameter of {group!r}: the group admits no "
                "orthogonal map (canonicalise the transformer first: lmc.perm.canonicalize)"
            )
        seg = spec.spec[name][axis][k]
        a_part = a.narrow(axis, offset, seg.extent).movedim(axis, 0).reshape(n, -1)
        b = state_b[name]
        b_part = b.narrow(axis, offset, seg.extent).movedim(axis, 0).reshape(n, -1)
        total += a_part.double().cpu() @ b_part.double().cpu().T
    return total


def _is_anchor(spec: SymmetrySpec, name: str, axis: int) -> bool:
    """Whether ``name`` is transformed on ``axis`` only (one segment there)."""
    entries = spec.spec[name]
    return len(entries[axis]) == 1 and all(e is None for i, e in enumerate(entries) if i != axis)


def _objective(
    spec: SymmetrySpec, state_a: Mapping[str, torch.Tensor], state_b: Mapping[str, torch.Tensor]
) -> float:
    total = 0.0
    for name in spec.spec.permuted_names:
        if name in state_a and name in state_b:
            total += float(torch.sum(state_a[name].double() * state_b[name].double().to(
                state_a[name].device)))  # fmt: skip
    return total


def _only(
    alignment: Mapping[str, Transform], groups: Iterable[str], sizes: Mapping[str, int]
) -> Alignment:
    """``alignment`` on ``groups``, the identity permutation elsewhere."""
    keep = set(groups)
    return Alignment(
        {g: alignment[g] if g in keep else Permutation.identity(n) for g, n in sizes.items()}
    )


def check_orthogonal_groups(spec: SymmetrySpec, groups: Iterable[str]) -> None:
    """``LmcError`` unless every one of ``groups`` is a group of ``spec`` that admits a dense
    orthogonal map (not nested in heads)."""
    sizes = spec.group_sizes
    for g in groups:
        if g not in sizes:
            raise LmcError(f"{g!r} is not a group of the spec")
        if g in spec.heads or kind_rank(spec.kinds[g]) < kind_rank("orthogonal"):
            raise LmcError(
                f"group {g!r} admits {spec.kinds[g]} maps only (nested groups: permutations "
                "here), not a dense orthogonal map"
            )


def orthogonal_weight_matching(
    spec: SymmetrySpec,
    state_a: Mapping[str, torch.Tensor],
    state_b: Mapping[str, torch.Tensor],
    *,
    orthogonal_groups: Iterable[str] | None = None,
    seed: int = 0,
    max_iter: int = 20,
    tol: float = 1e-10,
) -> OrthogonalMatchResult:
    """Coordinate descent on ``Σ ⟨θ_A, T(θ_B)⟩``: orthogonal maps (Procrustes) for
    ``orthogonal_groups`` (default: :func:`default_orthogonal_groups`), permutations (weight
    matching, visiting orders from ``seed + round``) for every other group. See the module
    docstring. ``spec`` must be a :class:`SymmetrySpec` (of the canonical model)."""
    if not isinstance(spec, SymmetrySpec):
        raise LmcError("orthogonal weight matching needs a SymmetrySpec (lmc.perm.symmetry_spec)")
    sizes = spec.group_sizes
    orth = list(default_orthogonal_groups(spec) if orthogonal_groups is None else orthogonal_groups)
    check_orthogonal_groups(spec, orth)
    perm_spec = spec.spec.fixing(orth)
    perm_groups = [g for g in sizes if g not in orth]
    transforms: dict[str, Transform] = {g: Permutation.identity(n) for g, n in sizes.items()}
    before = _objective(spec, state_a, state_b)
    best, best_transforms = before, dict(transforms)
    per_pass: list[float] = []
    converged = False
    for round_ in range(max_iter):
        for g in orth:  # Procrustes, everything else held
            others = _only(transforms, [h for h in sizes if h != g], sizes).apply(spec, state_b)
            cross = None
            if round_ == 0:  # start from the terms no unknown permutation enters
                cross = cross_product(spec, g, state_a, others, anchors_only=True)
                cross = cross if torch.linalg.matrix_rank(cross) == cross.shape[0] else None
            if cross is None:
                cross = cross_product(spec, g, state_a, others)
            q = procrustes(cross)
            transforms[g] = Orthogonal(torch.zeros(1).long(), q[None])
        if perm_groups:
            rotated = _only(transforms, orth, sizes).apply(spec, state_b)
            init = {g: transforms[g].perm for g in perm_spec.group_sizes}
            found = weight_matching(
                perm_spec, state_a, rotated, seed=seed + round_, init_perm=init
            ).perm
            transforms.update({g: Permutation(p) for g, p in found.items()})
        value = _objective(spec, state_a, Alignment(transforms).apply(spec, state_b))
        per_pass.append(value)
        gained = value > best + tol * abs(best)
        if value > best:
            best, best_transforms = value, dict(transforms)
        if not gained:
            converged = True
            break
    alignment = Alignment(best_transforms)
    return OrthogonalMatchResult(
        alignment=alignment,
        orthogonal_groups=tuple(orth),
        objective_before=before,
        objective_after=best,
        objective_per_pass=tuple(per_pass),
        passes=len(per_pass),
        converged=converged,
    )


# ---------------------------------------------------------------------------------------------
# the method's record: ``orthogonal``


def _align(job: AlignJob, *, max_iter: int, tol: float) -> MethodOutput:
    om = orthogonal_weight_matching(
        job.symmetry, job.state_a, job.state_b, seed=job.seed, max_iter=max_iter, tol=tol
    )
    extras = {
        "orthogonal_groups": list(om.orthogonal_groups),
        "passes": om.passes,
        "converged": om.converged,
        "objective_per_pass": list(om.objective_per_pass),
        "distance_from_permutation": distances_from_permutation(om.alignment, om.orthogonal_groups),
    }
    return MethodOutput(om.alignment, extras)


METHOD = register_method(
    AlignmentMethod(
        "orthogonal",
        _align,
        "orthogonal weight matching of pre-LN transformers: in the canonical form, an "
        "orthogonal map of the residual stream (Procrustes) and permutations of MLP units, "
        "heads and head dims (weight matching), by coordinate descent (data-free)",
        settings=(
            MethodSetting("max_iter", 20, "most coordinate-descent rounds", minimum=1),
            MethodSetting(
                "tol",
                1e-10,
                "stop after a round that raises the matching objective by at most this fraction",
                type=float,
                minimum=0.0,
            ),
        ),
        canonical=True,
        order=60,
        summary="pre-LN transformers: an orthogonal map of the residual stream and "
        "permutations, in the canonical form, where the pair is then measured",
    )
)


__all__ = [
    "OrthogonalMatchResult",
    "check_orthogonal_groups",
    "cross_product",
    "default_orthogonal_groups",
    "distance_from_permutation",
    "distances_from_permutation",
    "orthogonal_weight_matching",
    "procrustes",
]
