"""What the walk knows: the union-find of channel groups, each value's layout, and which group
indexes each axis of each state tensor (parameter or floating buffer).

Handlers change this state only through the methods of :class:`TraceState`: ``bind`` (an axis
of a state tensor is indexed by these segments), ``unify`` (two tilings index the same units),
``open_group`` (a weight layer's outputs start a new group), ``freeze_segs`` / ``fix`` (these
groups or tensors must stay unpermuted) and ``unknown`` (an op not understood: freeze what
flows in, with a warning).
"""

from __future__ import annotations

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


UNBOUND = object()  # an axis of a state tensor no op has spoken about yet


class UnionFind:
    """Groups of units that must share one permutation; a frozen group stays unpermuted."""

    def __init__(self) -> None:
        self.parent: list[int] = []
        self.size: list[int] = []
        self.frozen: list[bool] = []
        self.name: list[str] = []

    def new(self, size: int, name: str) -> int:
        """A new group of ``size`` units, labelled ``name``; returns its id."""
        self.parent.append(len(self.parent))
        self.size.append(size)
        self.frozen.append(False)
        self.name.append(name)
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

    def freeze(self, i: int) -> None:
        """Group ``i`` (and whatever it is or will be merged with) stays unpermuted."""
        self.frozen[self.find(i)] = True

    def is_frozen(self, i: int) -> bool:
        """Whether group ``i`` stays unpermuted."""
        return self.frozen[self.find(i)]


@dataclass(frozen=True)
class LayerRecord:
    """A weight layer seen by the tracer (for activation matching's hook points).

    ``weight``: the weight's state name; ``axis``: the weight axis that indexes the value's
    units; ``node``: the fx node whose value the layer reads (consumer) or produces
    (producer); ``dim``: the dimension of that value holding the units.
    """

    weight: str
    axis: int
    node: str
    dim: int


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
        self.messages: list[str] = []
        self.consumers: list[LayerRecord] = []
        self.producers: list[LayerRecord] = []

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

    def layout(self, node: Any) -> Layout | None:
        """The layout of a node's value (``None`` for constants and unpermuted values)."""
        return self.env.get(node) if isinstance(node, fx.Node) else None

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
        """Make two tilings of one axis index the same units; freeze both if they can't."""
        if len(a) != len(b) or any((x.size, x.repeat) != (y.size, y.repeat) for x, y in zip(a, b)):
            self.freeze_segs(a)
            self.freeze_segs(b)
            return False
        for x, y in zip(a, b):
            if x.group is not None and y.group is not None:
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
