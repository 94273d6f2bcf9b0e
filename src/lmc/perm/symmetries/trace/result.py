"""Building the result of a walk: the :class:`PermutationSpec` and the layer records.

Each union-find root that is not frozen and has at least two units becomes one permutation,
named after the layer that opened it (``fc1``, ``stage1.0.conv2``; ``#2``, ``#3`` ... where
two groups would share a name). Every axis bound to no group, or to frozen ones only, is
``None`` in the spec; an axis of a fixed block keeps its segment with ``perm=None``.

A group cut into parts (``chunk`` / ``split``) becomes one segment per part. A group nested in
attention heads becomes a nested permutation of the spec (``spec.heads``); if its dims within
each head must stay in place (RoPE), its segment becomes one of the head group with ``repeat``
``d`` (whole heads move); with one head it is a plain group; with frozen heads it is frozen.

A group that moves in blocks (grouped-query attention's query heads, in blocks of the query
heads that share a key/value head) is written as its blocks' group, each unit ``factor`` times
wider; a nested group whose heads move in blocks keeps its dims within heads in place. A head
group of one unit (multi-query attention's one key/value head, read by every query head) is
kept where its dims within heads stay in place: it permutes nothing, but the maps within that
head (:mod:`lmc.perm.symmetries.within_heads`) nest in it (the symmetry spec drops it where none
is found).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..permutation_spec import PermutationSpec, Segment
from .state import UNBOUND, LayerRecord, Layout, Seg, TraceState


@dataclass
class TraceResult:
    """The derived spec plus what activation matching needs: where each weight reads/writes.

    Also what the stream layout (:mod:`lmc.perm.symmetries.residual_stream`) and the within-head
    groups (:mod:`lmc.perm.symmetries.within_heads`) read off the walk: ``graph``, the graph walked;
    ``node_groups``, for every node whose value carries permuted units, ``(dim, groups)``
    (``dim``: the unit dim of a plain layout, ``None`` for heads, tuples and stacks; the spec's
    group names it carries); ``collapsed``, for every spec segment that is a head group's
    whose dims within heads stay in place, ``(name, axis, segment) -> (nested group id, d)``
    (the nested group's union-find id, the same for the q rows of every layer that share it,
    and its dims per head).
    """

    spec: PermutationSpec
    consumers: list[LayerRecord] = field(default_factory=list)
    producers: list[LayerRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    graph: Any = None
    node_groups: dict[str, tuple[int | None, tuple[str, ...]]] = field(default_factory=dict)
    collapsed: dict[tuple[str, int, int], tuple[int, int]] = field(default_factory=dict)


class _GroupNames:
    """Names of the live groups, assigned in the order they are first asked for."""

    def __init__(self, st: TraceState) -> None:
        self.uf = st.uf
        self.names: dict[int, str] = {}
        self.used: set[str] = set()
        self.singles = _single_heads(self.uf)

    def __call__(self, group: int | None) -> str | None:
        """The name of ``group``, or ``None`` where it is frozen or has one unit (unless it is
        in ``singles``: a head group whose dims within heads stay in place)."""
        if group is None:
            return None
        r = self.uf.find(group)
        if self.uf.frozen[r] or (self.uf.size[r] < 2 and r not in self.singles):
            return None
        if r not in self.names:
            base = self.uf.name[r]
            label, k = base, 2
            while label in self.used:
                label, k = f"{base}#{k}", k + 1
            self.used.add(label)
            self.names[r] = label
        return self.names[r]


def _single_heads(uf: Any) -> set[int]:
    """The roots of the head groups of one unit (followed through the blocks they move in)
    that a nested group with its dims within heads in place is nested in (see the module
    docstring: multi-query attention's key/value head)."""
    out: set[int] = set()
    for i in range(len(uf.parent)):
        if uf.find(i) != i or uf.nest[i] is None or uf.frozen[i]:
            continue
        head = uf.find(uf.nest[i][0])
        if not (uf.within_frozen[i] or uf.coarse[head] is not None):
            continue
        while uf.coarse[head] is not None:
            head = uf.find(uf.coarse[head][0])
        if uf.size[head] == 1:
            out.add(head)
    return out


def build_result(st: TraceState) -> TraceResult:
    """The spec of every floating state tensor, from the bindings the walk left in ``st``."""
    name_of = _GroupNames(st)

    uf = st.uf
    heads: dict[str, tuple[str, int]] = {}
    Resolved = list[tuple[Segment, tuple[int, int] | None]]

    def plain(group: int, size: int, repeat: int) -> Segment:
        r = uf.find(group)
        if uf.coarse[r] is not None and not uf.frozen[r]:
            blocks, factor = uf.coarse[r]
            return plain(blocks, size // factor, repeat * factor)
        return Segment(name_of(group), size, repeat)

    def resolve(s: Seg, nested: dict[str, tuple[str, int]]) -> Resolved:
        if s.group is None:
            return [(Segment(None, s.size, s.repeat), None)]
        r = uf.find(s.group)
        if uf.parts[r] is not None and not uf.frozen[r]:
            out: Resolved = []
            for c in uf.parts[r]:
                out.extend(resolve(Seg(c, uf.size[uf.find(c)], s.repeat), nested))
            return out
        nest = uf.nest[r]
        if nest is None or uf.frozen[r]:
            return [(plain(s.group, s.size, s.repeat), None)]
        head, n_heads = uf.find(nest[0]), nest[1]
        if uf.is_frozen(head):
            return [(Segment(None, s.size, s.repeat), None)]
        if uf.within_frozen[r] or uf.coarse[head] is not None:
            d = s.size // n_heads
            return [(plain(head, n_heads, s.repeat * d), (r, d) if s.repeat == 1 else None)]
        name = name_of(s.group)
        head_name = name_of(head)
        if name is not None and head_name is not None:
            nested[name] = (head_name, n_heads)
        return [(Segment(name, s.size, s.repeat), None)]

    collapsed: dict[tuple[str, int, int], tuple[int, int]] = {}

    def entry(name: str, axis: int, segs: tuple[Seg, ...] | None | object) -> list[Segment] | None:
        if segs is UNBOUND or segs is None:
            return None
        out = [r for s in segs for r in resolve(s, heads)]
        for k, (seg, within) in enumerate(out):
            if within is not None and seg.perm is not None:
                collapsed[(name, axis, k)] = within
        return [seg for seg, _ in out]

    axes = {
        name: [entry(name, a, segs) for a, segs in enumerate(st.bind_map[st.alias[name]])]
        for name in st.shapes
    }
    spec = PermutationSpec(axes, st.shapes, heads)
    return TraceResult(
        spec, st.consumers, st.producers, list(st.messages), st.gm,
        _node_groups(st, lambda s: [seg for seg, _ in resolve(s, {})]), collapsed,
    )  # fmt: skip


def _node_groups(st: TraceState, resolve: Any) -> dict[str, tuple[int | None, tuple[str, ...]]]:
    """``node name -> (unit dim or None, group names)`` of every node with a live layout."""
    out: dict[str, tuple[int | None, tuple[str, ...]]] = {}
    for node in st.gm.graph.nodes:
        lay = st.layout(node) if node in st.env else None
        if lay is None:
            continue
        segs = lay.segs if hasattr(lay, "segs") else ()
        names = tuple(
            dict.fromkeys(seg.perm for s in segs for seg in resolve(s) if seg.perm is not None)
        )
        if names:
            out[node.name] = (lay.dim if type(lay) is Layout else None, names)
    return out
