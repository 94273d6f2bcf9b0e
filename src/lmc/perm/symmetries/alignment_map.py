"""The result of an alignment: one transform per symmetry group, whatever its kind.

An :class:`Alignment` maps each group name of a spec to a :class:`~lmc.perm.symmetries.transforms.
Transform` (a permutation, an orthogonal or an invertible map). It is what B needs so that
its units line up with A's: ``alignment.apply(spec, state_b)``. Today's permutation dicts
(``dict[str, LongTensor]``, :func:`lmc.perm.weight_matching`'s ``result.perm``) convert with
:meth:`Alignment.from_permutation` and back with :meth:`Alignment.to_permutation`; applying an
alignment of permutations gives exactly what :func:`lmc.perm.apply_permutation` gives.

``spec`` is a :class:`~lmc.perm.PermutationSpec` (enough for permutations) or a
:class:`~lmc.perm.symmetries.symmetry_spec.SymmetrySpec` (needed for any other kind: it says how
each axis transforms, its role, and which kinds each group admits). Groups nested in a head group
(``spec.heads``) must move whole heads as the head group's permutation says: a nested
permutation is block-structured by it, a nested linear map has that many heads and that head
order.

Composition: ``first.then(second)`` applies ``first`` then ``second`` (per group, see
:meth:`Transform.then`); ``inverse()`` undoes an alignment. ``save`` / ``load`` use one
safetensors file: tensors ``<group>/<field>`` plus a JSON description (kinds, sizes, heads) in
its metadata; nothing is pickled. ``load`` also reads a plain permutation file (group -> index
tensor, as ``lmc align`` writes).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from lmc.config import LmcError
from lmc.store import save_tensors

from .head_permutations import check_nested, compose_heads, split_heads
from .permutation_spec import AxisEntry, PermutationSpec, axis_index
from .permutations import MatchResult, check_permutation
from .symmetry_spec import SymmetrySpec
from .transforms import (
    PLANE_CLASSES,
    Invertible,
    Orthogonal,
    Permutation,
    Transform,
    act_tiled,
    is_plane_structured,
    kind_rank,
    read_tensor_file,
)
from .within_heads import covers, member_index, put_window, take_window

METADATA_KEY = "lmc.alignment"
FORMAT_VERSION = 1
CONVENTION = "new unit coordinates of B are M @ old (permutation: new unit i = old unit perm[i])"

AnySpec = PermutationSpec | SymmetrySpec


def _split(spec: AnySpec) -> tuple[PermutationSpec, SymmetrySpec | None]:
    if isinstance(spec, SymmetrySpec):
        return spec.spec, spec
    if isinstance(spec, PermutationSpec):
        return spec, None
    raise LmcError(f"expected a PermutationSpec or SymmetrySpec, got {type(spec).__name__}")


class Alignment(Mapping[str, Transform]):
    """Group name -> :class:`Transform` (see the module docstring). Immutable."""

    def __init__(self, transforms: Mapping[str, Transform]) -> None:
        if isinstance(transforms, Alignment):
            transforms = dict(transforms.items())
        for group, t in transforms.items():
            if not isinstance(t, Transform):
                raise LmcError(
                    f"group {group!r}: expected a Transform, got {type(t).__name__} (use "
                    "Alignment.from_permutation for index tensors)"
                )
        self._t = dict(sorted(transforms.items()))

    # ---- the mapping ------------------------------------------------------------------------
    def __getitem__(self, group: str) -> Transform:
        return self._t[group]

    def __iter__(self) -> Iterator[str]:
        return iter(self._t)

    def __len__(self) -> int:
        return len(self._t)

    def __repr__(self) -> str:
        counts: dict[str, int] = {}
        for t in self._t.values():
            counts[t.kind] = counts.get(t.kind, 0) + 1
        parts = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        return f"Alignment({len(self)} groups: {parts})"

    @property
    def kinds(self) -> dict[str, str]:
        """Group -> the kind of its transform."""
        return {g: t.kind for g, t in self._t.items()}

    # ---- conversion -------------------------------------------------------------------------
    @classmethod
    def from_permutation(cls, perm: Mapping[str, torch.Tensor]) -> Alignment:
        """An alignment of permutations from ``lmc.perm``'s ``dict[str, LongTensor]``."""
        if isinstance(perm, MatchResult):
            raise LmcError(f"got a {type(perm).__name__}: pass its .perm")
        return cls({g: Permutation(p) for g, p in perm.items()})

    def to_permutation(self) -> dict[str, torch.Tensor]:
        """The permutation dict (``LmcError`` if some group's transform is not a permutation)."""
        other = [g for g, t in self._t.items() if not isinstance(t, Permutation)]
        if other:
            raise LmcError(
                f"group {other[0]!r} has a {self._t[other[0]].kind} transform, not a permutation"
            )
        return {g: t.perm.clone() for g, t in self._t.items()}

    @classmethod
    def identity(cls, spec: AnySpec) -> Alignment:
        """Every group of ``spec`` as the identity permutation."""
        pspec, _ = _split(spec)
        return cls({g: Permutation.identity(n) for g, n in pspec.group_sizes.items()})

    # ---- checks -----------------------------------------------------------------------------
    def check(self, spec: AnySpec) -> None:
        """``LmcError`` unless this alignment fits ``spec``: one transform per group, of the
        group's size, of a kind the group admits, nested groups moving whole heads."""
        pspec, sym = _split(spec)
        sizes = pspec.group_sizes
        missing = [g for g in sizes if g not in self._t]
        if missing:
            raise LmcError(f"the alignment lacks group {missing[0]!r} of the spec")
        within = sym.within if sym is not None else {}
        extra = [g for g in self._t if g not in sizes and g not in within]
        if extra:
            raise LmcError(f"the alignment has group {extra[0]!r}, which the spec does not know")
        if all(isinstance(t, Permutation) for t in self._t.values()) and not any(
            g in self._t for g in within
        ):
            check_permutation(pspec, self.to_permutation())
            return
        for g, w in within.items():
            if g in self._t:
                self._check_within(g, w)
        for g, n in sizes.items():
            t = self._t[g]
            if t.size != n:
                raise LmcError(f"group {g!r} has {n} units, its transform {t.size}")
            if isinstance(t, Permutation):
                continue
            if sym is None:
                raise LmcError(
                    f"group {g!r} has a {t.kind} transform: applying it needs a SymmetrySpec "
                    "(axis roles), not a bare PermutationSpec (see lmc.perm.symmetry_spec)"
                )
            if kind_rank(t.kind) > kind_rank(sym.kinds[g]):
                raise LmcError(
                    f"group {g!r} admits {sym.kinds[g]} maps at most (it would change the "
                    f"function), got a {t.kind} one"
                )
        for g, (head, n_heads) in pspec.heads.items():
            t, h = self._t[g], self._t[head]
            if not isinstance(h, Permutation):
                raise LmcError(f"head group {head!r} must have a permutation, got a {h.kind} map")
            if isinstance(t, Permutation):
                check_nested(g, t.perm, head, h.perm)
            elif t.heads != n_heads or not torch.equal(t.head, h.perm):
                raise LmcError(
                    f"the {t.kind} map of {g!r} must act within the {n_heads} heads of {head!r} "
                    "and move them as its permutation does"
                )

    def _check_within(self, g: str, w: Any) -> None:
        t, h = self._t[g], self._t[w.head]
        if t.size != w.size:
            raise LmcError(f"within group {g!r} has {w.size} units, its transform {t.size}")
        if not isinstance(h, Permutation):
            raise LmcError(f"head group {w.head!r} must have a permutation, got a {h.kind} map")
        if isinstance(t, Permutation):
            parts = split_heads(t.perm, w.heads)
            if parts is None or not torch.equal(parts[0], h.perm):
                raise LmcError(f"the permutation of {g!r} must move whole heads as {w.head!r}")
            if w.kind in PLANE_CLASSES and not torch.equal(
                parts[1], torch.arange(w.dim).expand_as(parts[1])
            ):
                raise LmcError(
                    f"{g!r} is under rotary embeddings: permuting dims within its heads would "
                    "change the function"
                )
            return
        if t.heads != w.heads or not torch.equal(t.head, h.perm):
            raise LmcError(
                f"the {t.kind} map of {g!r} must act within the {w.heads} heads of {w.head!r} "
                "and move them as its permutation does"
            )
        planes = PLANE_CLASSES.get(w.kind)
        if planes is not None and not is_plane_structured(t.blocks, **planes.layout()):
            raise LmcError(
                f"{g!r} admits one rotation and scaling per frequency plane ({w.kind} maps) "
                f"only, got a general {t.kind} map"
            )

    def complete(self, spec: AnySpec) -> Alignment:
        """This alignment with every within group of ``spec`` it lacks made explicit (the head
        group's permutation, nothing changed within heads), so that it composes (:meth:`then`)
        with an alignment that has them."""
        _, sym = _split(spec)
        out = dict(self._t)
        for g, w in (sym.within if sym is not None else {}).items():
            if g not in out:
                head = out[w.head]
                if not isinstance(head, Permutation):
                    raise LmcError(f"head group {w.head!r} must have a permutation")
                within = torch.arange(w.dim).expand(w.heads, w.dim)
                out[g] = Permutation(compose_heads(head.perm, within))
        return Alignment(out)

    # ---- applying ---------------------------------------------------------------------------
    def apply(
        self, spec: AnySpec, state_dict: Mapping[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        """A NEW state dict with every group's transform applied to every axis it indexes
        (each by its role). Tensors no group touches are copied; ``state_dict`` is untouched;
        it may hold a subset of the spec's tensors (shapes must match)."""
        self.check(spec)
        pspec, sym = _split(spec)
        perms = {g: t.perm for g, t in self._t.items() if isinstance(t, Permutation)}
        within = {}
        if sym is not None:
            for key, members in member_index(sym.within).items():
                mine = tuple((g, m) for g, m in members if g in self._t)
                if mine:
                    within[key] = (mine, sym.within)
        out: dict[str, torch.Tensor] = {}
        for name, tensor in state_dict.items():
            if name not in pspec:
                out[name] = tensor.clone()
                continue
            if tuple(tensor.shape) != pspec.shapes[name]:
                raise LmcError(
                    f"{name!r} has shape {list(tensor.shape)} but the spec expects "
                    f"{list(pspec.shapes[name])}: the spec was made for another architecture"
                )
            new = tensor
            for axis, entry in enumerate(pspec[name]):
                if entry is None:
                    continue
                roles = sym.roles[(name, axis)] if sym is not None else None
                inside = {k: within[(name, axis, k)] for k in range(len(entry))
                          if (name, axis, k) in within}  # fmt: skip
                new = self._apply_axis(new, axis, entry, roles, perms, inside)
            out[name] = new.clone() if new is tensor else new
        return out

    def _apply_axis(
        self,
        x: torch.Tensor,
        axis: int,
        entry: AxisEntry,
        roles: tuple[str | None, ...] | None,
        perms: Mapping[str, torch.Tensor],
        inside: Mapping[int, Any] | None = None,
    ) -> torch.Tensor:
        inside = inside or {}
        if not inside and all(seg.perm is None or seg.perm in perms for seg in entry):
            return x.index_select(axis, axis_index(entry, perms, device=x.device))  # exactly
        pieces, offset = [], 0
        for k, seg in enumerate(entry):
            piece = x.narrow(axis, offset, seg.extent)
            if k in inside:  # within groups' maps (their head order: the head group's)
                members, groups = inside[k]
                original = piece
                if not covers(members, groups, seg.repeat):  # the rest: whole heads move
                    piece = self._t[seg.perm].act(piece, axis, roles[k], seg.repeat)
                for g, member in members:
                    heads, length = groups[g].heads, member.tiles * groups[g].dim
                    window = take_window(original, axis, heads, member, length)
                    moved = act_tiled(self._t[g], window, axis, member.role, member.tiles, heads)
                    piece = put_window(piece, axis, heads, member, moved)
            elif seg.perm is not None:
                piece = self._t[seg.perm].act(piece, axis, roles[k], seg.repeat)
            pieces.append(piece)
            offset += seg.extent
        return torch.cat(pieces, dim=axis)

    # ---- algebra ----------------------------------------------------------------------------
    def inverse(self) -> Alignment:
        """The alignment that undoes this one (per group)."""
        return Alignment({g: t.inverse() for g, t in self._t.items()})

    def then(self, second: Alignment) -> Alignment:
        """This alignment followed by ``second`` (same groups): ``second.apply(spec,
        self.apply(spec, θ)) == self.then(second).apply(spec, θ)``."""
        if not isinstance(second, Alignment):
            second = Alignment(second)
        if set(self._t) != set(second._t):
            raise LmcError("cannot compose alignments of different groups")
        return Alignment({g: t.then(second[g]) for g, t in self._t.items()})

    # ---- files ------------------------------------------------------------------------------
    def to_tensors(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """``(tensors named <group>/<field>, JSON description)``: what :meth:`save` writes."""
        tensors: dict[str, torch.Tensor] = {}
        groups: dict[str, Any] = {}
        for g, t in self._t.items():
            if "/" in g:
                raise LmcError(f"group name {g!r} contains '/', which the file format reserves")
            groups[g] = t.to_json()
            for field, value in t.to_tensors().items():
                tensors[f"{g}/{field}"] = value
        meta = {"format": METADATA_KEY, "version": FORMAT_VERSION, "convention": CONVENTION}
        return tensors, {**meta, "groups": groups}

    def save(self, path: str | os.PathLike) -> None:
        """Write the alignment to a ``.safetensors`` file, atomically (see the module
        docstring)."""
        tensors, meta = self.to_tensors()
        save_tensors(path, tensors, metadata={METADATA_KEY: json.dumps(meta, sort_keys=True)})

    @classmethod
    def from_tensors(
        cls, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any]
    ) -> Alignment:
        """Rebuild an alignment from :meth:`to_tensors`' output (checked)."""
        if int(meta.get("version", 0)) != FORMAT_VERSION:
            raise LmcError(
                f"alignment format version {meta.get('version')!r} is not {FORMAT_VERSION}"
            )
        groups = meta.get("groups")
        if not isinstance(groups, Mapping):
            raise LmcError("an alignment description must have a 'groups' mapping")
        parts: dict[str, dict[str, torch.Tensor]] = {g: {} for g in groups}
        for key, value in tensors.items():
            g, _, field = key.rpartition("/")
            if g not in parts:
                raise LmcError(f"tensor {key!r} belongs to no group of the alignment")
            parts[g][field] = value
        return cls({g: Transform.from_parts(groups[g], parts[g]) for g in groups})

    @classmethod
    def load(cls, path: str | os.PathLike) -> Alignment:
        """Read an alignment written by :meth:`save`, or a plain permutation file."""
        tensors, meta = read_tensor_file(path, METADATA_KEY)
        if meta is None:
            return cls.from_permutation(tensors)
        return cls.from_tensors(tensors, meta)


def random_alignment(spec: SymmetrySpec, seed: int, kind: str = "invertible") -> Alignment:
    """A random alignment: each group gets a random element of ``min(kind, its admissible
    kind)`` (``kind``: ``permutation``, ``orthogonal`` or ``invertible``), from ``seed`` alone.

    Drawn from one ``torch.Generator``: a ``randperm`` per group not nested in heads (sorted
    names), then each nested group (sorted) within its head group's permutation, then a dense
    orthogonal / invertible map for the non-nested groups that get one, then (unless
    ``kind="permutation"``) one map per within group of the spec (``rope`` groups: per-plane
    rotations for ``orthogonal``, rotations and scalings for ``invertible``; ``rope_interleaved``
    groups alike in their layout). With
    ``kind="permutation"`` this is exactly :func:`lmc.perm.random_permutation`'s permutation.
    """
    if not isinstance(spec, SymmetrySpec):
        raise LmcError("random_alignment needs a SymmetrySpec (lmc.perm.symmetry_spec)")
    cap = kind_rank(kind)
    gen = torch.Generator().manual_seed(int(seed))
    heads, sizes = spec.heads, spec.group_sizes
    out: dict[str, Transform] = {
        g: Permutation(torch.randperm(n, generator=gen)) for g, n in sizes.items() if g not in heads
    }

    def chosen(g: str) -> str:
        return ("permutation", "orthogonal", "invertible")[min(cap, kind_rank(spec.kinds[g]))]

    classes = {"permutation": Permutation, "orthogonal": Orthogonal, "invertible": Invertible}
    for g, (head, n_heads) in sorted(heads.items()):
        cls = classes[chosen(g)]
        out[g] = cls.random(sizes[g], gen, heads=n_heads, head=out[head].perm)
    for g in sorted(out):
        if g not in heads and chosen(g) != "permutation":
            out[g] = classes[chosen(g)].random(sizes[g], gen)
    if cap > 0:  # maps within heads the permutation spec keeps in place
        for g, w in spec.within.items():
            head = out[w.head].perm
            if w.kind in PLANE_CLASSES:
                out[g] = PLANE_CLASSES[w.kind].random(w.size, gen, heads=w.heads, head=head,
                                                      spread=1.0 if cap == 1 else 2.0)  # fmt: skip
            else:
                cls = classes[("permutation", "orthogonal", "invertible")[min(cap, 2)]]
                out[g] = cls.random(w.size, gen, heads=w.heads, head=head)
    return Alignment(out)


def compose_alignments(first: Alignment, second: Alignment) -> Alignment:
    """``first`` followed by ``second`` (see :meth:`Alignment.then`)."""
    return first.then(second)


__all__ = ["Alignment", "compose_alignments", "random_alignment"]
