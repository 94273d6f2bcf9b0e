"""Weight matching on one screen: the documented reference for :func:`lmc.perm.weight_matching`.

Git Re-Basin's Algorithm 1 as plainly as it can be written: start from the identity; each pass
visits the permutation groups in a seeded random order and, for group ``g``, builds the dense
similarity

    S_g[i, j] = Σ_{(t, k) indexed by g}  ⟨ unit i of A_t on axis k,
                                           unit j of B_t on axis k with its other axes permuted ⟩

then replaces ``π_g`` by SciPy's linear assignment of ``S_g`` when that raises the objective
Σ ⟨θ_A, π(θ_B)⟩. The descent stops after a pass without a step (Git Re-Basin's rule).

It is slow (every visit recomputes every product) and exists to be read and to check the fast
path: ``weight_matching(spec, a, b, seed=s, init="identity", tol=0, solver="scipy")`` takes
the same steps in the same order, so it returns the same permutation and objective
(``tests/perm/test_weight_match_reference.py``). Specs with attention heads (``spec.heads``:
whole heads move together) are left to the fast path.

Convention: the result ``perm`` is for B; ``apply_permutation(spec, perm, state_b)`` puts B's
units in A's order (new unit ``i`` is old unit ``perm[g][i]``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from scipy.optimize import linear_sum_assignment

from lmc.config import LmcError

from ..symmetries.permutation_spec import PermutationSpec
from ..symmetries.permutations import identity_permutation, permute_tensor

#: a step must beat the group's current value by this fraction (float noise never moves units)
STEP_TOL = 1e-12


def _units(x: torch.Tensor, axis: int, offset: int, size: int, repeat: int) -> torch.Tensor:
    """The ``size`` units of one segment of ``x``'s ``axis``, one row each (float64)."""
    block = x.movedim(axis, 0)[offset : offset + size * repeat]
    return block.reshape(size, -1).double()


def similarity(
    spec: PermutationSpec,
    group: str,
    state_a: Mapping[str, torch.Tensor],
    state_b: Mapping[str, torch.Tensor],
    perm: Mapping[str, torch.Tensor],
) -> torch.Tensor:
    """Dense ``S_g`` (n × n, float64): rows are A's units of ``group``, columns B's."""
    n = spec.group_sizes[group]
    s = torch.zeros(n, n, dtype=torch.float64)
    for name, axis in spec.groups[group]:
        b = permute_tensor(spec, perm, name, state_b[name], skip_axis=axis)
        offset = 0
        for seg in spec[name][axis]:
            if seg.perm == group:
                args = (axis, offset, seg.size, seg.repeat)
                s += _units(state_a[name], *args) @ _units(b, *args).T
            offset += seg.extent
    return s


def weight_matching_reference(
    spec: PermutationSpec,
    state_a: Mapping[str, torch.Tensor],
    state_b: Mapping[str, torch.Tensor],
    seed: int = 0,
    max_iter: int = 100,
) -> dict[str, torch.Tensor]:
    """The permutation of B's units that best matches A's weights (returned for B)."""
    if spec.heads:
        raise LmcError("the reference matches plain permutation specs; use weight_matching")
    perm = identity_permutation(spec)
    names = list(spec.group_sizes)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(max_iter):
        steps = 0
        for gi in torch.randperm(len(names), generator=gen).tolist():
            g = names[gi]
            s = similarity(spec, g, state_a, state_b, perm)
            rows, cols = linear_sum_assignment(s.numpy(), maximize=True)
            new = torch.as_tensor(cols[rows.argsort()], dtype=torch.long)
            idx = torch.arange(len(new))
            old_value, new_value = float(s[idx, perm[g]].sum()), float(s[idx, new].sum())
            if new_value - old_value > STEP_TOL * max(abs(old_value), math.ulp(1.0)):
                perm[g], steps = new, steps + 1
        if steps == 0:
            break
    return perm
