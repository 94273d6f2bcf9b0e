"""Permutations as index tensors: draw, apply, compose, invert, compare.

Convention (used everywhere in ``lmc.perm``): a permutation ``p`` of ``n`` units is an int64
tensor holding a rearrangement of ``0..n-1``; applying it makes *new unit ``i`` = old unit
``p[i]``*. For a weight ``W`` whose rows are indexed by ``p`` and whose columns by the previous
layer's ``p_prev`` the permuted weight is ``W[p][:, p_prev]``, i.e. ``P W P_prevᵀ`` with the
permutation matrix ``P[i, p[i]] = 1``. A bias becomes ``b[p]``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from lmc.config import LmcError

from .head_permutations import check_nested, random_nested
from .permutation_spec import PermutationSpec, axis_index

Perm = dict[str, torch.Tensor]


@dataclass(frozen=True, eq=False)
class MatchResult:
    """What every matching function returns: at least ``perm``, the permutation for B.

    ``perm``: group -> int64 index tensor such that ``apply_permutation(spec, result.perm,
    state_b)`` has B's units in A's order. Each method's result (``WeightMatchingResult``,
    ``ActivationMatchingResult``, ``SteMatchingResult``) adds its own typed fields. A result is
    not a permutation: pass ``result.perm`` where one is expected. Results are frozen and
    compared by identity (their fields hold tensors).
    """

    perm: Perm


def _refuse_result(perm: object) -> None:
    if isinstance(perm, MatchResult):
        raise LmcError(
            f"got a {type(perm).__name__} where a permutation was expected: pass its .perm"
        )


def identity_permutation(spec: PermutationSpec) -> Perm:
    """Every permutation of ``spec`` as the identity ``arange(n)``."""
    return {name: torch.arange(n) for name, n in spec.group_sizes.items()}


def random_permutation(spec: PermutationSpec, seed: int) -> Perm:
    """A uniformly random valid permutation for each group of ``spec``, from ``seed`` alone.

    Groups are drawn in sorted name order from one ``torch.Generator``, so the same seed gives
    the same permutation on every machine; groups nested in a head group (``spec.heads``) are
    drawn after the others, block-structured by their head permutation with a uniformly random
    permutation inside each head.
    """
    gen = torch.Generator().manual_seed(int(seed))
    heads = spec.heads
    sizes = spec.group_sizes
    out = {name: torch.randperm(n, generator=gen) for name, n in sizes.items() if name not in heads}
    for name, (head, n_heads) in sorted(heads.items()):
        out[name] = random_nested(out[head], sizes[name] // n_heads, gen)
    return dict(sorted(out.items()))


def check_permutation(spec: PermutationSpec, perm: Mapping[str, torch.Tensor]) -> None:
    """``LmcError`` unless ``perm`` holds one valid permutation of the right size per group."""
    _refuse_result(perm)
    sizes = spec.group_sizes
    missing = [g for g in sizes if g not in perm]
    if missing:
        raise LmcError(f"the permutation lacks group {missing[0]!r} of the spec")
    extra = [g for g in perm if g not in sizes]
    if extra:
        raise LmcError(f"the permutation has group {extra[0]!r}, which the spec does not know")
    for name, n in sizes.items():
        p = perm[name]
        if p.dim() != 1 or p.numel() != n:
            raise LmcError(f"permutation {name!r} must have {n} entries, got shape {list(p.shape)}")
        if not torch.equal(torch.sort(p.detach().long().cpu()).values, torch.arange(n)):
            raise LmcError(f"{name!r} is not a permutation of 0..{n - 1}")
    for name, (head, _) in spec.heads.items():
        check_nested(name, perm[name], head, perm[head])


def permute_tensor(
    spec: PermutationSpec,
    perm: Mapping[str, torch.Tensor],
    name: str,
    tensor: torch.Tensor,
    skip_axis: int | None = None,
) -> torch.Tensor:
    """``tensor`` (the state entry ``name``) with every permuted axis gathered.

    ``skip_axis`` leaves that one axis as it is (weight matching needs the others only).
    Returns ``tensor`` itself when nothing is permuted.
    """
    out = tensor
    for axis, index in _gathers(spec, perm, name, tensor.device, skip_axis):
        out = out.index_select(axis, index)
    return out


def apply_permutation(
    spec: PermutationSpec,
    perm: Mapping[str, torch.Tensor],
    state_dict: Mapping[str, torch.Tensor],
) -> dict[str, torch.Tensor]:
    """A NEW state dict with ``perm`` applied: new unit ``i`` of each group is old unit ``p[i]``.

    Tensors the spec does not permute are copied (``clone``), so the result never shares
    memory with ``state_dict``, which is left untouched. A state dict may hold a subset of the
    spec's tensors (e.g. parameters only); its tensors must have the spec's shapes.
    """
    check_permutation(spec, perm)
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state_dict.items():
        if name in spec:
            if tuple(tensor.shape) != spec.shapes[name]:
                raise LmcError(
                    f"{name!r} has shape {list(tensor.shape)} but the permutation spec expects "
                    f"{list(spec.shapes[name])}: the spec was made for another architecture"
                )
            permuted = permute_tensor(spec, perm, name, tensor)
            out[name] = permuted.clone() if permuted is tensor else permuted
        else:
            out[name] = tensor.clone()
    return out


def compose_permutations(
    first: Mapping[str, torch.Tensor], second: Mapping[str, torch.Tensor]
) -> Perm:
    """The permutation that applies ``first`` and then ``second``.

    ``apply(compose(first, second), θ) == apply(second, apply(first, θ))``; as index tensors
    the result is ``first[second]``.
    """
    if set(first) != set(second):
        raise LmcError("cannot compose permutations of different groups")
    return {k: first[k][second[k].to(first[k].device)] for k in first}


def invert_permutation(perm: Mapping[str, torch.Tensor]) -> Perm:
    """The inverse: ``compose(perm, invert(perm))`` is the identity."""
    out = {}
    for k, p in perm.items():
        inv = torch.empty_like(p)
        inv[p] = torch.arange(p.numel(), device=p.device, dtype=p.dtype)
        out[k] = inv
    return out


def moved_fraction(perm: Mapping[str, torch.Tensor]) -> dict[str, float]:
    """Per group, the fraction of units ``i`` with ``p[i] != i``."""
    return {
        k: float((p.cpu() != torch.arange(p.numel())).double().mean()) if p.numel() else 0.0
        for k, p in perm.items()
    }


class WorkBuffer:
    """A reusable work buffer (one flat tensor per dtype, grown on demand, on ``device``).

    Weight matching's products and gathers of n² or K·n values would otherwise each take fresh
    memory from the operating system (glibc maps every block over 32 MB anew), whose page
    faults cost as much as the float64 accumulation itself: on GPT-2's 3072² groups ``S += P``
    took 23 ms with a fresh float32 ``P`` and 10 ms converting ``P`` through a kept float64
    buffer. A view from :meth:`get` is valid until the next :meth:`get` of the same dtype.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._flat: dict[torch.dtype, torch.Tensor] = {}

    def get(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        numel = math.prod(shape)
        flat = self._flat.get(dtype)
        if flat is None or flat.numel() < numel:
            flat = torch.empty(numel, dtype=dtype, device=self.device)
            self._flat[dtype] = flat
        return flat[:numel].view(shape)


def matching_objective(
    spec: PermutationSpec,
    state_a: Mapping[str, torch.Tensor],
    state_b: Mapping[str, torch.Tensor],
    perm: Mapping[str, torch.Tensor] | None = None,
) -> float:
    """The weight-matching objective Σ ⟨θ_A, π(θ_B)⟩, summed in float64.

    The sum runs over every tensor of the spec with at least one permuted axis (weights,
    biases, norm parameters and running statistics); ``perm=None`` is the identity.
    """
    _refuse_result(perm)
    total = 0.0
    # kept for this call, per device: two buffers the gathers alternate between, one for _inner
    pool: dict[tuple[int, torch.device], WorkBuffer] = {}

    def work(slot: int, device: torch.device) -> WorkBuffer:
        return pool.setdefault((slot, device), WorkBuffer(device))

    for name in spec.permuted_names:
        if name not in state_a or name not in state_b:
            continue
        a = state_a[name].detach()  # parameters that require grad cannot be gathered into out=
        b = state_b[name].detach().to(a.device)
        if perm is not None:  # gathered axis by axis, as permute_tensor does
            for i, (axis, index) in enumerate(_gathers(spec, perm, name, a.device)):
                shape = (*b.shape[:axis], index.numel(), *b.shape[axis + 1 :])
                b = torch.index_select(
                    b, axis, index, out=work(i % 2, a.device).get(shape, b.dtype)
                )
        total += _inner(a, b, work(2, a.device))
    return total


def _gathers(
    spec: PermutationSpec,
    perm: Mapping[str, torch.Tensor],
    name: str,
    device: torch.device,
    skip_axis: int | None = None,
) -> list[tuple[int, torch.Tensor]]:
    """(axis, index) of every permuted axis of ``name`` but ``skip_axis`` (whose groups
    ``perm`` need not hold): what :func:`permute_tensor` gathers."""
    return [
        (axis, axis_index(entry, perm, device=device))
        for axis, entry in enumerate(spec[name])
        if entry is not None and axis != skip_axis
    ]


_INNER_CHUNK = 1 << 18  # values per chunk of _inner's products (1 MB of float32: stays in cache)


def _inner(a: torch.Tensor, b: torch.Tensor, out: WorkBuffer) -> float:
    """⟨a, b⟩ in float64: float64 tensors directly; others as their float32 elementwise
    products, each rounded once, summed in float64 (so the sum is float64-exact). Large tensors
    go in chunks of :data:`_INNER_CHUNK` values through ``out``'s buffer: faster than one
    product tensor (2x on GPT-2's embedding, measured) and than a float32 matrix product, whose
    accumulation would follow ``torch.set_float32_matmul_precision`` (TF32 or bfloat16) and
    lose ~1e-5 of the total where terms cancel."""
    if a.dtype == b.dtype == torch.float64:
        return float(torch.sum(a * b))
    a, b = a.reshape(-1), b.reshape(-1)
    if a.numel() <= _INNER_CHUNK:
        return float(torch.sum(a.float() * b.float(), dtype=torch.float64))
    buf = out.get((_INNER_CHUNK,), torch.float32)
    parts = []
    for start in range(0, a.numel(), _INNER_CHUNK):
        x, y = a[start : start + _INNER_CHUNK].float(), b[start : start + _INNER_CHUNK].float()
        parts.append(torch.mul(x, y, out=buf[: x.numel()]).sum(dtype=torch.float64))
    return float(torch.stack(parts).sum())
