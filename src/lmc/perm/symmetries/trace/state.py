"""What the walk knows: the union-find of channel groups, each value's layout, and which group
indexes each axis of each state tensor (parameter or floating buffer).

Handlers change this state only through the methods of :class:`TraceState`: ``bind`` (an axis
of a state tensor is indexed by these segments), ``unify`` (two tilings index the same units),
``open_group`` (a weight layer's outputs start a new group), ``freeze_segs`` / ``fix`` (these
groups or tensors must stay unpermuted) and ``unknown`` (an op not understood: freeze what
flows in, with a warning).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import fx, nn
from torch.fx.passes.shape_prop import TensorMetadata


class Seg(NamedTuple):
    """A block of a value's unit dimension: ``size`` units of union-find group ``group``
    (``None``: a fixed block), each ``repeat`` consecutive indices wide."""

    group: int | None
    size: int
    repeat: int

    @property
    def extent(self) -> int:
        """Number of indices the block covers."""
        return self.size * self.repeat


class Layout(NamedTuple):
    """Where a tensor value carries permutable units: dimension ``dim`` (non-negative),
    tiled by ``segs``. A value without a layout (``None``) is unpermuted."""

    dim: int
    segs: tuple[Seg, ...]


class HeadLayout(NamedTuple):
    """A value split into attention heads: dim ``head_dim`` indexes the ``n_heads`` heads (group
    ``heads``), dim ``dim`` the ``d`` dims within each head; together they are the ``n_heads * d``
    flat units of group ``group``, which is nested in ``heads`` (``x.view(..., H, d)``)."""

    head_dim: int
    dim: int
    group: int
    heads: int
    n_heads: int
    d: int

    @property
    def segs(self) -> tuple[Seg, ...]:
        """Both groups, as segments (what freezing it freezes)."""
        return (Seg(self.group, self.n_heads * self.d, 1), Seg(self.heads, self.n_heads, 1))


class Stacked(NamedTuple):
    """A value whose dim ``dim`` stacks pieces of the units side by side (a fused qkv
    projection viewed as ``(..., 3, H, d)`` or ``(..., 3, C)``): piece ``i``, the value
    ``x.select(dim, i)``, has layout ``items[i]``, its dims numbered as in that value (without
    ``dim``)."""

    dim: int
    items: tuple[Any, ...]

    @property
    def segs(self) -> tuple[Seg, ...]:
        """The segments of every piece (what freezing it freezes)."""
        return tuple(s for item in self.items if item is not None for s in item.segs)


class Items(tuple):
    """The layouts of the items of a tuple value (``chunk``, ``split``, a module's outputs)."""

    @property
    def segs(self) -> tuple[Seg, ...]:
        """The segments of every item (what freezing it freezes)."""
        return tuple(s for item in self if item is not None for s in item.segs)


UNBOUND = object()  # an axis of a state tensor no op has spoken about yet


def _coarsenable(x: Seg, y: Seg) -> bool:
    """Whether two segments index one axis alike: the same units, or (both permuted) the
    units of one in blocks of a whole number of the other's (see :meth:`TraceState.unify`)."""
    if (x.size, x.repeat) == (y.size, y.repeat):
        return True
    if x.group is None or y.group is None or x.extent != y.extent:
        return False
    fine, coarse = (x, y) if x.size > y.size else (y, x)
    factor, rest = divmod(fine.size, coarse.size)
    return rest == 0 and coarse.repeat == fine.repeat * factor


class UnionFind:
    """Groups of units that must share one permutation; a frozen group stays unpermuted."""

    def __init__(self) -> None:
        self.parent: list[int] = []
        self.size: list[int] = []
        self.frozen: list[bool] = []
        self.name: list[str] = []
        # attention heads: a nested group's (head group, number of heads); whether its dims
        # within each head must stay in place (heads still move as blocks)
        self.nest: list[tuple[int, int] | None] = []
        self.within_frozen: list[bool] = []
        # a group cut into consecutive parts (``chunk`` / ``split``): the parts' ids
        self.parts: list[tuple[int, ...] | None] = []
        # a group whose units move in blocks of ``factor`` (grouped-query attention: the query
        # heads that share a key/value head): (the coarse group of the blocks, factor)
        self.coarse: list[tuple[int, int] | None] = []

    def new(self, size: int, name: str) -> int:
        """A new group of ``size`` units, labelled ``name``; returns its id."""
        self.parent.append(len(self.parent))
        self.size.append(size)
        self.frozen.append(False)
        self.name.append(name)
        self.nest.append(None)
        self.within_frozen.append(False)
        self.parts.append(None)
        self.coarse.append(None)
        return len(self.parent) - 1

    def find(self, i: int) -> int:
        """The representative of group ``i``."""
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, i: int, j: int) -> None:
        """Merge two groups; the earliest names the union, frozen if either was."""
        ri, rj = self.find(i), self.find(j)
        if ri == rj:
            return
        lo, hi = min(ri, rj), max(ri, rj)
        self.parent[hi] = lo
        self.frozen[lo] = self.frozen[lo] or self.frozen[hi]
        self.within_frozen[lo] = self.within_frozen[lo] or self.within_frozen[hi]
        nest_lo, nest_hi = self.nest[lo], self.nest[hi]
        parts_lo, parts_hi = self.parts[lo], self.parts[hi]
        coarse_lo, coarse_hi = self.coarse[lo], self.coarse[hi]
        self.nest[lo] = nest_lo or nest_hi
        self.parts[lo] = parts_lo or parts_hi
        self.coarse[lo] = coarse_lo or coarse_hi
        if coarse_lo and coarse_hi:
            if coarse_lo[1] == coarse_hi[1]:
                self.union(coarse_lo[0], coarse_hi[0])
            else:
                self.freeze(lo)
        if nest_lo and nest_hi:
            if nest_lo[1] == nest_hi[1]:
                self.union(nest_lo[0], nest_hi[0])
            else:
                self.freeze(lo)
        if parts_lo and parts_hi:
            sizes_lo = [self.size[self.find(c)] for c in parts_lo]
            if sizes_lo == [self.size[self.find(c)] for c in parts_hi]:
                for a, b in zip(parts_lo, parts_hi):
                    self.union(a, b)
            else:
                self.freeze(lo)
        if self.nest[lo] and self.parts[lo]:
            self.freeze(lo)  # heads of a group cut into parts: not followed
        if self.coarse[lo] and (self.nest[lo] or self.parts[lo]):
            self.freeze(lo)  # blocks of a nested group or of one cut into parts: not followed
        if self.frozen[lo]:
            self.freeze(lo)  # propagate to parts and heads

    def freeze(self, i: int) -> None:
        """Group ``i`` (and whatever it is or will be merged with) stays unpermuted; so do its
        parts and, for a nested group, its heads."""
        r = self.find(i)
        self.frozen[r] = True
        for c in self.parts[r] or ():
            if not self.is_frozen(c):
                self.freeze(c)
        nest = self.nest[r]
        if nest is not None and not self.is_frozen(nest[0]):
            self.freeze(nest[0])
        coarse = self.coarse[r]
        if coarse is not None and not self.frozen[self.find(coarse[0])]:
            self.freeze(coarse[0])

    def freeze_within(self, i: int) -> None:
        """The dims within each head of nested group ``i`` stay in place (heads may move); a
        group that is not nested is frozen."""
        r = self.find(i)
        if self.nest[r] is None:
            self.freeze(r)
        else:
            self.within_frozen[r] = True

    def is_frozen(self, i: int) -> bool:
        """Whether group ``i`` stays unpermuted (or moves in blocks that do)."""
        r = self.find(i)
        return self.frozen[r] or (self.coarse[r] is not None and self.is_frozen(self.coarse[r][0]))

    def coarsen(self, i: int, factor: int, label: str) -> int | None:
        """Group ``i``'s units move in consecutive blocks of ``factor`` (unit ``u`` goes where
        block ``u // factor`` goes, keeping its place in the block): the id of the group of the
        blocks (a new one unless ``i`` was coarsened so before), or ``None`` (and ``i``
        frozen) where that cannot be. Grouped-query attention: the query heads that share a
        key/value head move with it."""
        r = self.find(i)
        if self.coarse[r] is not None:
            if self.coarse[r][1] == factor:
                return self.find(self.coarse[r][0])
            self.freeze(r)
            return None
        if (
            self.frozen[r]
            or self.nest[r] is not None
            or self.parts[r] is not None
            or factor < 1
            or self.size[r] % factor
        ):
            self.freeze(r)
            return None
        blocks = self.new(self.size[r] // factor, label)
        self.coarse[r] = (blocks, factor)
        return blocks

    def nest_in(self, i: int, n_heads: int, label: str) -> int | None:
        """Nest group ``i`` in heads of ``size / n_heads`` dims: its head group's id (a new one
        unless ``i`` is nested already), or ``None`` (and ``i`` frozen) where that cannot be."""
        r = self.find(i)
        if self.frozen[r] or self.parts[r] or n_heads < 1 or self.size[r] % n_heads:
            self.freeze(r)
            return None
        if self.nest[r] is not None:
            if self.nest[r][1] != n_heads:
                self.freeze(r)
                return None
            return self.find(self.nest[r][0])
        head = self.new(n_heads, label)
        self.nest[r] = (head, n_heads)
        return head

    def split(self, i: int, sizes: list[int], label: str) -> tuple[int, ...] | None:
        """Cut group ``i`` into consecutive parts of ``sizes`` units: the parts' ids (the
        existing ones if it was cut so before), or ``None`` (and ``i`` frozen)."""
        r = self.find(i)
        if self.parts[r] is not None:
            old = [self.size[self.find(c)] for c in self.parts[r]]
            if old == sizes:
                return self.parts[r]
            self.freeze(r)
            return None
        if self.nest[r] is not None or self.coarse[r] is not None or sum(sizes) != self.size[r]:
            self.freeze(r)
            return None
        parts = tuple(self.new(n, f"{label}.{k}") for k, n in enumerate(sizes))
        self.parts[r] = parts
        if self.frozen[r]:
            self.freeze(r)
        return parts


@dataclass(frozen=True)
class LayerRecord:
    """A weight layer seen by the tracer (for activation matching's hook points).

    ``weight``: the weight's state name; ``axis``: the weight axis that indexes the value's
    units; ``node``: the fx node whose value the layer reads (consumer) or produces
    (producer); ``dim``: the dimension of that value holding the units; ``layer``: the node
    of the layer itself (empty where not recorded); ``bias``: the state name of the layer's
    bias (``None``: none, or not recorded).
    """

    weight: str
    axis: int
    node: str
    dim: int
    layer: str = ""
    bias: str | None = None


class TraceState:
    """The mutable state of one walk over a traced graph ``gm`` whose state dict is ``state``.

    ``env`` maps each node to its value's :class:`Layout` (or ``None``); ``leaf`` maps the
    ``get_attr`` nodes that read a state tensor to its name. Tensors shared under several
    names (tied weights) are bound through one canonical name (``alias``).
    """

    def __init__(self, gm: fx.GraphModule, state: Mapping[str, torch.Tensor]) -> None:
        self.gm = gm
        self.shapes = {k: tuple(v.shape) for k, v in state.items() if v.is_floating_point()}
        canonical: dict[int, str] = {}
        self.alias: dict[str, str] = {}
        for k, v in state.items():
            if k in self.shapes:
                self.alias[k] = canonical.setdefault(id(v), k)
        self.bind_map: dict[str, list[Any]] = {
            k: [UNBOUND] * len(s) for k, s in self.shapes.items() if self.alias[k] == k
        }
        self.uf = UnionFind()
        self.env: dict[fx.Node, Layout | None] = {}
        self.leaf: dict[fx.Node, str] = {}
        # views of a state tensor of the same rank (``self.cls.expand(B, -1, -1)``,
        # ``self.pos[:, :T]``): an elementwise op may bind the axes they keep whole
        self.leaf_view: dict[fx.Node, str] = {}
        # the transpose of a 2-D state tensor (``self.weight.T``, ``self.weight.t()``): a
        # product ``x @ W.T`` is a dense layer reading W's axis 1
        self.leaf_t: dict[fx.Node, str] = {}
        self.messages: list[str] = []
        self.consumers: list[LayerRecord] = []
        self.producers: list[LayerRecord] = []
        # the nodes whose values feed attention (:mod:`.attention_inputs`; set by the walk)
        self.feeds_attention: frozenset[fx.Node] = frozenset()

    # ---- reading the graph ---------------------------------------------------------------------
    def module(self, node: fx.Node) -> nn.Module:
        """The submodule a ``call_module`` node calls."""
        return self.gm.get_submodule(node.target)

    def shape(self, node: Any) -> tuple[int, ...] | None:
        """The shape of a node's tensor value (``None``: not a node or not a tensor)."""
        if not isinstance(node, fx.Node):
            return None
        meta = node.meta.get("tensor_meta")
        return tuple(meta.shape) if isinstance(meta, TensorMetadata) else None

    def layout(self, node: Any) -> Any:
        """The layout of a node's value (``None`` for constants and unpermuted values): a
        :class:`Layout`, a :class:`HeadLayout` (one whose within-head dims must stay in place is
        returned as the plain layout of its heads) or :class:`Items` of a tuple."""
        lay = self.env.get(node) if isinstance(node, fx.Node) else None
        if isinstance(lay, HeadLayout):
            if self.uf.is_frozen(lay.group) or self.uf.is_frozen(lay.heads):
                return None if self.uf.is_frozen(lay.heads) else self._heads_only(lay)
            if self.uf.within_frozen[self.uf.find(lay.group)]:
                return self._heads_only(lay)
        return lay

    @staticmethod
    def _heads_only(lay: HeadLayout) -> Layout:
        return Layout(lay.head_dim, (Seg(lay.heads, lay.n_heads, 1),))

    def plain(self, node: Any) -> bool:
        """Whether the node's layout is ``None`` or a plain :class:`Layout`."""
        lay = self.layout(node)
        return lay is None or type(lay) is Layout

    @staticmethod
    def arg(node: fx.Node, index: int, key: str, default: Any = None) -> Any:
        """Argument ``index`` of a call, or its keyword ``key``."""
        if len(node.args) > index:
            return node.args[index]
        return node.kwargs.get(key, default)

    @staticmethod
    def first_arg(node: fx.Node) -> Any:
        """The first argument of a call, positional or keyword (a module's input)."""
        if node.args:
            return node.args[0]
        return next(iter(node.kwargs.values()), None)

    @staticmethod
    def tensor_inputs(node: fx.Node) -> list[fx.Node]:
        """The distinct nodes among a node's arguments, in order."""
        out: list[fx.Node] = []
        fx.node.map_arg((node.args, node.kwargs), lambda n: out.append(n) if n not in out else None)
        return out

    # ---- groups --------------------------------------------------------------------------------
    def freeze_segs(self, segs: Sequence[Seg] | None) -> None:
        """The groups of ``segs`` stay unpermuted."""
        for s in segs or ():
            if s.group is not None:
                self.uf.freeze(s.group)

    def live_groups(self, segs: Sequence[Seg] | None) -> bool:
        """Whether ``segs`` holds a group that is not frozen (worth a warning to freeze)."""
        return any(s.group is not None and not self.uf.is_frozen(s.group) for s in segs or ())

    def unify(self, a: Sequence[Seg], b: Sequence[Seg]) -> bool:
        """Make two tilings of one axis index the same units; freeze both if they can't.

        Two segments of one extent whose units differ by a factor ``f`` (``x`` has ``f``
        times the units of ``y``, each ``f`` times narrower: a key/value head repeated for
        the ``f`` query heads that share it) make ``x``'s units move in blocks of ``f`` as
        ``y``'s (:meth:`UnionFind.coarsen`)."""
        if len(a) != len(b) or not all(_coarsenable(x, y) for x, y in zip(a, b)):
            self.freeze_segs(a)
            self.freeze_segs(b)
            return False
        for x, y in zip(a, b):
            if x.group is not None and y.group is not None and x.size != y.size:
                fine, coarse = (x, y) if x.size > y.size else (y, x)
                label = self.uf.name[self.uf.find(coarse.group)]
                blocks = self.uf.coarsen(fine.group, fine.size // coarse.size, label)
                if blocks is None:
                    self.uf.freeze(coarse.group)
                else:
                    self.uf.union(blocks, coarse.group)
            elif x.group is not None and y.group is not None:
                self.uf.union(x.group, y.group)
            elif x.group is not None:
                self.uf.freeze(x.group)
            elif y.group is not None:
                self.uf.freeze(y.group)
        return True

    def open_group(
        self, name: str | None, axis: int, size: int, label: str
    ) -> tuple[Seg, ...] | None:
        """The output units of a weight layer: a new group, or the one its weight already has."""
        if name is None or name not in self.alias:
            return None
        cur = self.bind_map[self.alias[name]][axis]
        if cur is UNBOUND:
            segs = (Seg(self.uf.new(size, label), size, 1),)
            self.bind(name, axis, segs)
            return segs
        return cur  # a shared weight reuses its group (or None if it is fixed)

    # ---- state tensors -------------------------------------------------------------------------
    def bind(self, name: str | None, axis: int, segs: Sequence[Seg] | None) -> None:
        """Record that axis ``axis`` of state tensor ``name`` is indexed by ``segs``."""
        if name is None or name not in self.alias:
            self.freeze_segs(segs)  # not a state tensor: it cannot follow a permutation
            return
        row = self.bind_map[self.alias[name]]
        segs = tuple(segs) if segs is not None else None
        cur = row[axis]
        if cur is UNBOUND:
            row[axis] = segs
        elif cur is None:
            self.freeze_segs(segs)
        elif segs is None:
            self.freeze_segs(cur)
        else:
            self.unify(cur, segs)

    def fix(self, name: str | None) -> None:
        """State tensor ``name`` is used in a way that forbids permuting any of its axes."""
        if name is not None and name in self.alias:
            for axis in range(len(self.shapes[name])):
                self.bind(name, axis, None)

    def fix_leaf(self, node: Any) -> None:
        """If ``node`` reads a state tensor, that tensor is fixed."""
        if isinstance(node, fx.Node) and node in self.leaf:
            self.fix(self.leaf[node])
        elif isinstance(node, fx.Node) and node in self.leaf_view:
            self.fix(self.leaf_view[node])
        elif isinstance(node, fx.Node) and node in self.leaf_t:
            self.fix(self.leaf_t[node])

    # ---- results of ops ------------------------------------------------------------------------
    def unpermuted(self, node: fx.Node, x: Any) -> None:
        """``node`` derives a new, unpermuted value from unpermuted ``x``: if ``x`` is a state
        tensor, the derived value (a slice, a view, ...) would not follow its permutation."""
        self.fix_leaf(x)
        self.env[node] = None

    def warn(self, node: fx.Node, why: str) -> None:
        """Record a warning naming ``node`` for the groups it leaves unpermuted."""
        t = node.target
        target = t if isinstance(t, str) else getattr(t, "__name__", repr(t))
        self.messages.append(
            f"lmc.perm: node {node.name!r} ({node.op} {target}) {why}; "
            "the permutation groups it touches are left unpermuted"
        )

    def unknown(self, node: fx.Node, why: str = "is not understood") -> None:
        """Freeze everything permuted that flows into ``node``; its output is unpermuted."""
        touched = False
        for inp in self.tensor_inputs(node):
            lay = self.layout(inp)
            if lay is not None:
                touched = touched or self.live_groups(lay.segs)
                self.freeze_segs(lay.segs)
            self.fix_leaf(inp)
        if node.op == "call_module":
            prefix = f"{node.target}."
            for name in self.alias:
                if name.startswith(prefix):
                    self.fix(name)
        if touched:
            self.warn(node, why)
        self.env[node] = None


def reshape_layout(
    in_shape: tuple[int, ...], out_shape: tuple[int, ...], lay: Layout
) -> Layout | None:
    """Where a reshape moves the units of dim ``lay.dim``; ``None`` if it cuts a unit apart.

    With ``R_in`` the product of the input dims after the channel dim and ``R_out`` that of
    the output dims after the dim ``e`` that starts at the same flat offset, index
    ``(u * r + t) * R_in + rest`` lands at ``u * (r * R_in / R_out) + ...`` along ``e``: units
    stay whole iff ``R_out`` divides ``r * R_in`` for every segment (and its offset). No such
    ``e`` (``x.flatten()`` folds the batch in) is not understood either.
    """
    d = lay.dim
    prefix = math.prod(in_shape[:d])
    r_in = math.prod(in_shape[d + 1 :])
    for e in range(len(out_shape)):
        if math.prod(out_shape[:e]) != prefix:
            continue
        if out_shape[e] == 1 and in_shape[d] != 1:
            continue
        r_out = math.prod(out_shape[e + 1 :])
        if any((s.repeat * r_in) % r_out for s in lay.segs):
            return None
        segs = tuple(Seg(s.group, s.size, s.repeat * r_in // r_out) for s in lay.segs)
        return Layout(e, segs)
    return None
