"""Permutation specs: which permutation indexes which axis of which tensor.

A :class:`PermutationSpec` is the one source of truth for a model's permutation symmetry: a map
from every parameter and floating buffer name to one entry per axis of that tensor. An entry is

- ``None``: the axis is never permuted;
- a tuple of :class:`Segment` records that tile the axis in order. Segment ``(perm, size,
  repeat)`` covers ``size * repeat`` consecutive indices; index ``offset + u * repeat + t``
  (``0 <= t < repeat``) belongs to unit ``u`` of permutation ``perm`` (``None`` = a fixed
  block). ``repeat > 1`` arises where a Linear reads a flattened ``(C, H, W)`` map: its input
  index is ``c * H * W + s``, so one channel owns ``H * W`` consecutive columns. Several
  segments arise where a layer reads a channel concatenation (``torch.cat``).

The reverse map (permutation -> list of ``(tensor name, axis)``) and the sizes of the
permutations are derived from this map on demand, never stored.

Hand-written specs use :meth:`PermutationSpec.from_dict` with shorthand entries: ``None``, a
permutation name ``"P1"``, a pair ``("P1", repeat)``, or a list of segments
``[("P1", size, repeat), (None, size, 1), ...]``.

Attention heads: ``heads`` maps a *nested* permutation (the ``H * d`` q/k dims, or v/output
dims, of one attention layer) to ``(head permutation, H)``. The head permutation is a group of
``H`` units (it need not index any axis itself); the nested one must be block-structured by it
(whole heads move, each head's dims permute among themselves; see
:mod:`lmc.perm.symmetries.head_permutations`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import torch
from torch import nn

from lmc.config import LmcError


class Segment(NamedTuple):
    """A block of one axis: ``size`` units of permutation ``perm``, each ``repeat`` wide."""

    perm: str | None
    size: int
    repeat: int = 1

    @property
    def extent(self) -> int:
        """Number of axis indices the segment covers: ``size * repeat``."""
        return self.size * self.repeat


AxisEntry = tuple[Segment, ...] | None


def _shape_of(obj: Any) -> tuple[int, ...]:
    if isinstance(obj, torch.Tensor):
        return tuple(obj.shape)
    return tuple(int(s) for s in obj)


def _normalise_entry(name: str, axis: int, entry: Any, size: int) -> AxisEntry:
    """Turn a shorthand axis entry into a canonical tuple of segments (or ``None``)."""
    where = f"spec entry {name!r} axis {axis}"
    if entry is None:
        return None
    if isinstance(entry, str):
        segments = [Segment(entry, size, 1)]
    elif (
        isinstance(entry, (tuple, list))
        and len(entry) == 2
        and isinstance(entry[0], str)
        and isinstance(entry[1], int)
        and not isinstance(entry, Segment)
    ):
        perm, repeat = entry
        if repeat < 1 or size % repeat:
            raise LmcError(f"{where}: repeat {repeat} does not divide the axis size {size}")
        segments = [Segment(perm, size // repeat, repeat)]
    elif isinstance(entry, (tuple, list)):
        segments = []
        for seg in entry:
            if not isinstance(seg, (tuple, list)) or len(seg) not in (2, 3):
                raise LmcError(
                    f"{where}: segments must be (perm or None, size[, repeat]), got {seg!r}"
                )
            perm, seg_size = seg[0], int(seg[1])
            repeat = int(seg[2]) if len(seg) == 3 else 1
            if perm is not None and not isinstance(perm, str):
                raise LmcError(f"{where}: a permutation name must be a string, got {perm!r}")
            if seg_size < 0 or repeat < 1:
                raise LmcError(f"{where}: bad segment {seg!r}")
            segments.append(Segment(perm, seg_size, repeat))
        total = sum(s.extent for s in segments)
        if total != size:
            raise LmcError(f"{where}: segments cover {total} indices but the axis has {size}")
    else:
        raise LmcError(
            f"{where}: cannot read {entry!r}; use None, a name, (name, repeat) or segments"
        )
    if all(s.perm is None for s in segments):
        return None
    return _merge_fixed(segments)


def _merge_fixed(segments: Iterable[Segment]) -> tuple[Segment, ...]:
    """Merge consecutive fixed (``perm=None``) segments and drop empty ones."""
    out: list[Segment] = []
    for seg in segments:
        if seg.extent == 0:
            continue
        if seg.perm is None:
            seg = Segment(None, seg.extent, 1)
            if out and out[-1].perm is None:
                out[-1] = Segment(None, out[-1].size + seg.size, 1)
                continue
        out.append(seg)
    return tuple(out)


class PermutationSpec:
    """Which permutation (if any) indexes each axis of each tensor of a model's state.

    ``axes`` maps tensor names to one entry per axis (see the module docstring); ``shapes``
    maps the same names to their shapes (a state dict or a module also works). Integer buffers
    (``num_batches_tracked``) are never permuted and need not be listed. ``heads``: nested
    permutation -> ``(head permutation, number of heads)`` (see the module docstring).
    """

    def __init__(
        self,
        axes: Mapping[str, Sequence[Any]],
        shapes: Mapping[str, Any] | nn.Module,
        heads: Mapping[str, tuple[str, int]] | None = None,
    ) -> None:
        if isinstance(shapes, nn.Module):
            shapes = shapes.state_dict()
        self._axes: dict[str, tuple[AxisEntry, ...]] = {}
        self._shapes: dict[str, tuple[int, ...]] = {}
        for name, entries in axes.items():
            if name not in shapes:
                raise LmcError(f"spec names tensor {name!r}, but no shape is given for it")
            shape = _shape_of(shapes[name])
            entries = list(entries)
            if len(entries) != len(shape):
                raise LmcError(
                    f"spec entry {name!r} has {len(entries)} axes but the tensor has shape "
                    f"{list(shape)}"
                )
            self._axes[name] = tuple(
                _normalise_entry(name, k, e, shape[k]) for k, e in enumerate(entries)
            )
            self._shapes[name] = shape
        self._heads: dict[str, tuple[str, int]] = {}
        for g, value in (heads or {}).items():
            if not (isinstance(value, (tuple, list)) and len(value) == 2):
                raise LmcError(f"heads[{g!r}] must be (head permutation, number of heads)")
            head, n = str(value[0]), int(value[1])
            if n < 1 or head == g:
                raise LmcError(f"heads[{g!r}]: bad head permutation {value!r}")
            self._heads[str(g)] = (head, n)
        _ = self.group_sizes  # validates that every permutation has one size

    @classmethod
    def from_dict(
        cls,
        axes: Mapping[str, Sequence[Any]],
        shapes: Mapping[str, Any] | nn.Module,
        heads: Mapping[str, tuple[str, int]] | None = None,
    ) -> PermutationSpec:
        """A hand-written spec: ``{"fc1.weight": ("P1", None), "fc1.bias": ("P1",), ...}``."""
        return cls(axes, shapes, heads)

    @property
    def heads(self) -> dict[str, tuple[str, int]]:
        """Nested permutation -> ``(head permutation, number of heads)`` (a copy)."""
        return dict(self._heads)

    # ---- the map and what is derived from it -------------------------------------------------
    @property
    def axes(self) -> dict[str, tuple[AxisEntry, ...]]:
        """Tensor name -> one entry (tuple of segments, or ``None``) per axis (a copy)."""
        return dict(self._axes)

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return dict(self._shapes)

    def __getitem__(self, name: str) -> tuple[AxisEntry, ...]:
        return self._axes[name]

    def __contains__(self, name: object) -> bool:
        return name in self._axes

    def __iter__(self):
        return iter(self._axes)

    def __len__(self) -> int:
        return len(self._axes)

    @property
    def groups(self) -> dict[str, list[tuple[str, int]]]:
        """Permutation name -> the ``(tensor name, axis)`` pairs it indexes (derived)."""
        out: dict[str, list[tuple[str, int]]] = {}
        for name, entries in self._axes.items():
            for axis, entry in enumerate(entries):
                for seg in entry or ():
                    if seg.perm is not None and (name, axis) not in out.setdefault(seg.perm, []):
                        out[seg.perm].append((name, axis))
        return dict(sorted(out.items()))

    @property
    def group_sizes(self) -> dict[str, int]:
        """Permutation name -> number of units it permutes (derived; checked consistent)."""
        sizes: dict[str, int] = {}
        for name, entries in self._axes.items():
            for entry in entries:
                for seg in entry or ():
                    if seg.perm is None:
                        continue
                    if sizes.setdefault(seg.perm, seg.size) != seg.size:
                        raise LmcError(
                            f"permutation {seg.perm!r} has {sizes[seg.perm]} units in one place "
                            f"but {seg.size} in {name!r}: a permutation has one size"
                        )
        for g, (head, n) in self._heads.items():
            if g not in sizes:
                raise LmcError(f"heads names {g!r}, which indexes no axis of the spec")
            if g in {h for h, _ in self._heads.values()} or head in self._heads:
                raise LmcError(f"heads: {g!r} cannot be both nested and a head permutation")
            if sizes[g] % n:
                raise LmcError(f"{g!r} has {sizes[g]} units, not a multiple of {n} heads")
            if sizes.setdefault(head, n) != n:
                raise LmcError(
                    f"head permutation {head!r} has {sizes[head]} units but {g!r} says {n} heads"
                )
        return dict(sorted(sizes.items()))

    @property
    def permuted_names(self) -> list[str]:
        """Names of the tensors with at least one permuted axis."""
        return [n for n, entries in self._axes.items() if any(e is not None for e in entries)]

    def fixing(self, groups: Iterable[str]) -> PermutationSpec:
        """This spec with the segments of ``groups`` fixed (and no longer nested or nesting):
        the permutations the other groups still make. Fixed segments next to each other
        merge, as in any spec."""
        fixed = set(groups)
        axes = {
            name: [
                None
                if entry is None
                else [(None if s.perm in fixed else s.perm, s.size, s.repeat) for s in entry]
                for entry in entries
            ]
            for name, entries in self._axes.items()
        }
        heads = {g: h for g, h in self.heads.items() if g not in fixed and h[0] not in fixed}
        return PermutationSpec(axes, self.shapes, heads)

    def to_dict(self) -> dict[str, list[Any]]:
        """A JSON-friendly copy of the map, in the shorthand :meth:`from_dict` reads."""
        out: dict[str, list[Any]] = {}
        for name, entries in self._axes.items():
            row: list[Any] = []
            for entry in entries:
                if entry is None:
                    row.append(None)
                elif len(entry) == 1 and entry[0].repeat == 1:
                    row.append(entry[0].perm)
                elif len(entry) == 1:
                    row.append([entry[0].perm, entry[0].repeat])
                else:
                    row.append([[s.perm, s.size, s.repeat] for s in entry])
            out[name] = row
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PermutationSpec):
            return NotImplemented
        return (
            self._axes == other._axes
            and self._shapes == other._shapes
            and self._heads == other._heads
        )

    def __repr__(self) -> str:
        return (
            f"PermutationSpec({len(self.group_sizes)} permutations over "
            f"{len(self.permuted_names)} of {len(self._axes)} tensors)"
        )

    def summary(self) -> str:
        """A printable table: each permutation, its size and the tensor axes it indexes."""
        sizes = self.group_sizes
        lines = [repr(self)]
        for perm, members in self.groups.items():
            parts = []
            for name, axis in members:
                entry = self._axes[name][axis]
                seg = next(s for s in entry if s.perm == perm)
                tag = f"{name}[{axis}]"
                if seg.repeat > 1:
                    tag += f"x{seg.repeat}"
                if len(entry) > 1:
                    tag += "(part)"
                parts.append(tag)
            lines.append(f"  {perm} ({sizes[perm]}): {', '.join(parts)}")
        for g, (head, n) in sorted(self._heads.items()):
            lines.append(f"  {g} is nested in {head} ({n} heads of {sizes[g] // n})")
        fixed = [n for n in self._axes if n not in set(self.permuted_names)]
        if fixed:
            lines.append(f"  unpermuted: {', '.join(fixed)}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def axis_index(
    entry: AxisEntry, perm: Mapping[str, torch.Tensor], device: Any = None
) -> torch.Tensor:
    """The gather index that permutes one axis: ``permuted = x.index_select(axis, index)``.

    New unit ``i`` of permutation ``p`` is old unit ``p[i]``; each unit's ``repeat`` indices
    move together, fixed segments stay in place.
    """
    parts = []
    offset = 0
    for seg in entry or ():
        if seg.perm is None:
            parts.append(torch.arange(offset, offset + seg.extent, device=device))
        else:
            p = perm[seg.perm].to(device=device, dtype=torch.long)
            if seg.repeat == 1:
                parts.append(p + offset)
            else:
                within = torch.arange(seg.repeat, device=device)
                parts.append((p[:, None] * seg.repeat + within[None, :]).reshape(-1) + offset)
        offset += seg.extent
    return torch.cat(parts) if len(parts) > 1 else parts[0]
