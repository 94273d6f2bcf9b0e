"""Handlers of ops without weights: how a value's layout flows through them.

- elementwise ops carry the layout; one that combines several permuted values *unites* their
  groups (a residual stream shares one permutation), a state tensor broadcast against them
  (``x * self.scale``) is bound to the group, any other fixed tensor freezes it;
- pooling, padding and resizing over the spatial dims of ``(N, C, ...)`` carry it;
- reshapes (flatten, view, reshape, unflatten, squeeze) carry it while channels stay whole,
  multiplying a segment's ``repeat`` when positions are folded in (a Linear after flattening
  ``(C, H, W)`` reads index ``c * H * W + s``); ``expand``, ``transpose`` and ``permute``
  and indexing that keeps the unit dim whole move it to another dim;
- a reduction over the unit dim gives an unpermuted value (a sum ignores order);
- ``cat`` along the unit dim concatenates segments;
- indexing (``x[...]``, and the ``slice`` / ``select`` ops of an exported graph) keeps the
  unit dim whole, or slices it where the slices of one value tile its units side by side (a
  fused projection cut into q, k and v by slicing, as Phi-3's ``qkv_proj``: cut as ``split``
  would), or is not understood.

A derived value of a state tensor (``self.p[0]``, ``self.p.view(...)``) fixes the tensor: the
value would not follow a permutation of it -- except an elementwise function of the tensor alone
(``1 + self.weight``, ``self.weight.float()``), which has the tensor's units and is bound as the
tensor.
"""

from __future__ import annotations

import math
from typing import Any

from torch import fx

from . import attention
from .state import HeadLayout, Items, Layout, Seg, Stacked, TraceState, reshape_layout
from .tables import METADATA_ATTRS


# ---- elementwise -----------------------------------------------------------------------------
def pointwise(st: TraceState, node: fx.Node, operands: list[Any]) -> None:
    """An op applied position by position to broadcast ``operands``."""
    out = st.shape(node)
    operands = [o for o in operands if st.shape(o) is not None]
    if out is None:
        return st.unknown(node, "gives a non-tensor result")
    if any(isinstance(st.layout(o), HeadLayout) for o in operands):
        return attention.pointwise_heads(st, node, operands)
    if not all(st.plain(o) for o in operands):
        return st.unknown(node)
    nd = len(out)
    permuted, plain = [], []
    for op in operands:
        lay = st.layout(op)
        if lay is not None:
            permuted.append((op, lay.dim + nd - len(st.shape(op)), lay.segs))
        else:
            plain.append(op)
    if not permuted:
        if _elementwise_of_leaf(st, node, plain):
            return
        for op in plain:
            st.fix_leaf(op)
        st.env[node] = None
        return
    dims = {e for _, e, _ in permuted}
    segs = permuted[0][2]
    ok = len(dims) == 1 and all(st.unify(segs, s) for _, _, s in permuted[1:])
    e = permuted[0][1]
    if ok:
        for op in plain:
            shp = st.shape(op)
            k = e - (nd - len(shp))
            if k < 0 or shp[k] == 1:
                st.fix_leaf(op)  # broadcast along the units: one value for all of them
            elif op in st.leaf or (
                op in st.leaf_view
                and st.shapes[st.leaf_view[op]][k] == shp[k]
                and len(st.shapes[st.leaf_view[op]]) == len(shp)
            ):
                name = st.leaf.get(op) or st.leaf_view[op]
                for a in range(len(shp)):
                    st.bind(name, a, segs if a == k else None)
            else:
                if st.live_groups(segs):
                    st.warn(node, "combines permuted channels with a fixed tensor")
                ok = False
    if not ok or out[e] != sum(s.extent for s in segs):
        for _, _, s in permuted:
            st.freeze_segs(s)
        for op in plain:
            st.fix_leaf(op)
        st.env[node] = None
        return
    st.env[node] = Layout(e, segs)


def _elementwise_of_leaf(st: TraceState, node: fx.Node, operands: list[Any]) -> bool:
    """Record ``node`` as a view of a state tensor when it is an elementwise function of that
    tensor alone (its other operands single numbers): ``1 + self.weight`` (Gemma's RMSNorm gain),
    ``self.weight.float()``. Its units are the tensor's, so binding its axes binds the tensor's;
    otherwise (``False``) nothing is recorded."""
    out = st.shape(node)
    leaves = [o for o in operands if o in st.leaf or o in st.leaf_view]
    others = [o for o in operands if o not in leaves]
    if len(leaves) != 1 or out is None or any(math.prod(st.shape(o)) != 1 for o in others):
        return False
    name = st.leaf.get(leaves[0]) or st.leaf_view[leaves[0]]
    if tuple(out) != tuple(st.shape(leaves[0])) or len(out) != len(st.shapes[name]):
        return False
    st.leaf_view[node] = name
    st.env[node] = None
    return True


def pointwise_module(st: TraceState, node: fx.Node) -> None:
    """An activation, softmax, dropout or identity module."""
    pointwise(st, node, [st.first_arg(node)])


def pointwise_op(st: TraceState, node: fx.Node) -> None:
    """An elementwise function or method over all its tensor arguments."""
    pointwise(st, node, st.tensor_inputs(node))


def data_first(st: TraceState, node: fx.Node) -> None:
    """``x.to(y)`` / ``x.type_as(y)``: ``y`` gives only a dtype or device."""
    pointwise(st, node, [node.args[0]])


# ---- spatial ops -----------------------------------------------------------------------------
def spatial(st: TraceState, node: fx.Node, x: Any) -> None:
    """Pooling, padding or resizing of the spatial dims of an ``(N, C, ...)`` map."""
    xs, out, lay = st.shape(x), st.shape(node), st.layout(x)
    if lay is None:
        st.unpermuted(node, x)
    elif (
        out is not None
        and lay.dim == 1
        and len(xs) >= 3
        and len(out) == len(xs)
        and out[1] == xs[1]
    ):
        st.env[node] = lay
    else:
        st.unknown(node, "pools over the channel dimension")


def spatial_module(st: TraceState, node: fx.Node) -> None:
    """A pooling, padding or upsampling module."""
    if getattr(st.module(node), "return_indices", False):
        return st.unknown(node, "returns pooling indices")
    spatial(st, node, st.first_arg(node))


def spatial_function(st: TraceState, node: fx.Node) -> None:
    """A pooling, padding or interpolation function (a tuple result is refused)."""
    spatial(st, node, node.args[0])


# ---- shape ops -------------------------------------------------------------------------------
def reshape(st: TraceState, node: fx.Node) -> None:
    """``flatten``, ``view``, ``reshape``, ``unflatten``, ``squeeze``, ``unsqueeze`` (function,
    method or ``nn.Flatten`` / ``nn.Unflatten``)."""
    x = st.first_arg(node)
    lay = st.layout(x)
    if lay is None:
        return st.unpermuted(node, x)
    if isinstance(lay, HeadLayout):
        return attention.reshape_heads(st, node, x, lay)
    if not isinstance(lay, Layout) or st.shape(node) is None:
        return st.unknown(node)
    if attention.split_one_head(st, node, x, lay):
        return
    new = reshape_layout(st.shape(x), st.shape(node), lay)
    if new is None and attention.split_heads(st, node, x, lay):
        return
    if new is None and attention.stack_pieces(st, node, x, lay):
        return
    if new is None:
        st.unknown(node, "reshapes the channel dimension into pieces")
    else:
        st.env[node] = new


def _view_of_leaf(st: TraceState, node: fx.Node, x: Any) -> bool:
    """Record ``node`` as a same-rank view of the state tensor ``x`` reads (if it does)."""
    name = (st.leaf.get(x) or st.leaf_view.get(x)) if isinstance(x, fx.Node) else None
    out = st.shape(node)
    if name is not None and out is not None and len(out) == len(st.shapes[name]):
        st.leaf_view[node] = name
        return True
    return False


def expand(st: TraceState, node: fx.Node) -> None:
    """``x.expand(...)`` / ``x.expand_as(y)``: broadcasts size-1 dims, may add leading ones
    (a value split into heads keeps both dims: ``k[:, :, None].expand(...)`` repeats key/value
    heads for grouped-query attention)."""
    x = node.args[0]
    xs, out, lay = st.shape(x), st.shape(node), st.layout(x)
    if lay is None:
        if _view_of_leaf(st, node, x):
            st.env[node] = None
            return
        return st.unpermuted(node, x)
    if xs is None or out is None or not isinstance(lay, (Layout, HeadLayout)):
        return st.unknown(node)
    shift = len(out) - len(xs)
    if isinstance(lay, Layout) and attention.repeats_one_head(st, x, out):
        lay = st.env[x]
    if isinstance(lay, HeadLayout):
        hd, wd = lay.head_dim + shift, lay.dim + shift
        if out[hd] == xs[lay.head_dim] and out[wd] == xs[lay.dim]:
            st.env[node] = lay._replace(head_dim=hd, dim=wd)
        else:
            st.unknown(node)
        return
    e = lay.dim + shift
    if out[e] == xs[lay.dim]:
        st.env[node] = Layout(e, lay.segs)
    else:
        st.unknown(node)


def _move_dim(st: TraceState, node: fx.Node, order: Any) -> None:
    """The unit dim moves to where ``order`` (dim indices, or ``None``: not understood)
    puts it."""
    x = node.args[0]
    lay = st.layout(x)
    if lay is None:
        return st.unpermuted(node, x)
    if order is None or not all(isinstance(d, int) for d in order):
        return st.unknown(node)
    nd = len(st.shape(x))
    pos = [d % nd for d in order]
    if isinstance(lay, HeadLayout):
        st.env[node] = lay._replace(head_dim=pos.index(lay.head_dim), dim=pos.index(lay.dim))
        return
    if isinstance(lay, Stacked):
        st.env[node] = attention.move_stacked(lay, pos)
        return
    if not isinstance(lay, Layout):
        return st.unknown(node)
    st.env[node] = Layout(pos.index(lay.dim), lay.segs)


def permute(st: TraceState, node: fx.Node) -> None:
    """``x.permute(2, 0, 1)`` / ``x.permute((2, 0, 1))`` / ``torch.permute(x, dims)``."""
    dims = node.args[1:] or (node.kwargs.get("dims"),)
    if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
        dims = dims[0]
    _move_dim(st, node, list(dims))


def transpose(st: TraceState, node: fx.Node) -> None:
    """``transpose`` / ``swapaxes`` / ``swapdims`` of two dims."""
    dims = node.args[1:]
    shape = st.shape(node.args[0])
    if len(dims) != 2 or not all(isinstance(d, int) for d in dims) or shape is None:
        return _move_dim(st, node, None)
    if len(shape) == 2 and dims[0] % 2 != dims[1] % 2:
        return transpose_2d(st, node)  # of a 2-D state tensor: a transposed weight
    order = list(range(len(shape)))
    a, b = dims[0] % len(shape), dims[1] % len(shape)
    order[a], order[b] = order[b], order[a]
    _move_dim(st, node, order)


def reduce(st: TraceState, node: fx.Node) -> None:
    """``mean``, ``sum``, ``amax``, ...: over the unit dim the result is unpermuted; over other
    dims the units move down by the number of reduced dims before them (unless keepdim). A
    value split into heads: see :func:`attention.reduce_heads`."""
    x, dim = node.args[0], st.arg(node, 1, "dim", None)
    xs, out, lay = st.shape(x), st.shape(node), st.layout(x)
    dims = [] if dim is None else [dim] if not isinstance(dim, (list, tuple)) else list(dim)
    if not all(isinstance(d, int) for d in dims) or out is None:
        return st.unknown(node)  # over computed dims
    if lay is None or not dims:
        return st.unpermuted(node, x)  # a full reduction ignores the order of units
    if not isinstance(lay, (Layout, HeadLayout)):
        return st.unknown(node, "reduces a tuple or a stack of pieces")
    dims = [d % len(xs) for d in dims]
    if isinstance(lay, HeadLayout):
        return attention.reduce_heads(st, node, lay, dims)
    if lay.dim in dims:
        st.env[node] = None  # summing over units: order does not matter
        return
    new_dim = lay.dim - sum(d < lay.dim for d in dims) if len(out) < len(xs) else lay.dim
    if out[new_dim] != xs[lay.dim]:
        return st.unknown(node)
    st.env[node] = Layout(new_dim, lay.segs)


def cat(st: TraceState, node: fx.Node) -> None:
    """``torch.cat(tensors, dim)``: along the unit dim the segments of the pieces follow one
    another (an unpermuted piece is a fixed block); along another dim all pieces must share
    one layout, as in an elementwise op."""
    tensors = list(node.args[0])
    dim = st.arg(node, 1, "dim", None)
    if dim is None:
        dim = node.kwargs.get("axis", 0)
    out = st.shape(node)
    if out is None or not isinstance(dim, int) or any(st.shape(t) is None for t in tensors):
        return st.unknown(node)
    dim %= len(out)
    lays = [st.layout(t) for t in tensors]
    if all(lay is None for lay in lays):
        for t in tensors:
            st.fix_leaf(t)
        st.env[node] = None
        return
    if all(lay is None or lay.dim == dim for lay in lays):
        segs: list[Seg] = []
        for t, lay in zip(tensors, lays):
            if lay is None:
                st.fix_leaf(t)
                segs.append(Seg(None, st.shape(t)[dim], 1))
            else:
                segs.extend(lay.segs)
        st.env[node] = Layout(dim, tuple(segs))
        return
    pointwise(st, node, tensors)


def getitem(st: TraceState, node: fx.Node) -> None:
    """``x[...]`` with ints, full or partial slices, ``None`` and ``...``: the unit dim must be
    kept whole (``:``); an int there, a partial slice or a tensor index is not understood.
    Indexing a tuple or a shape gives an unpermuted value."""
    index_value(st, node, node.args[0], node.args[1])


def index_value(st: TraceState, node: fx.Node, x: Any, index: Any) -> None:
    """``node`` is ``x[index]`` (see :func:`getitem`)."""
    lay = st.layout(x)
    if lay is None:
        idx = index if isinstance(index, tuple) else (index,)
        keeps_rank = all(isinstance(i, slice) or i is Ellipsis for i in idx)
        if keeps_rank and _view_of_leaf(st, node, x):
            st.env[node] = None
            return
        return st.unpermuted(node, x)
    if isinstance(lay, Items):
        if isinstance(index, int) and -len(lay) <= index < len(lay):
            st.env[node] = lay[index]
        else:
            st.unknown(node)
        return
    xs = st.shape(x)
    idx = index if isinstance(index, tuple) else (index,)
    if xs is None or any(
        isinstance(i, fx.Node) or not isinstance(i, (int, slice, type(None), type(Ellipsis)))
        for i in idx
    ):
        return st.unknown(node, "indexes with a tensor")
    where = _index_map(xs, idx)
    if isinstance(lay, Stacked):
        return _index_stacked(st, node, lay, xs, idx, where)
    if isinstance(lay, HeadLayout):
        head, within = where.get(lay.head_dim), where.get(lay.dim)
        if head is None or head[1] != "whole" or within is None or within[1] == "int":
            return st.unknown(node, "selects or slices attention heads")
        if within[1] == "partial":
            attention._head_message(st, node, "slices the dims within heads")
            st.uf.freeze_within(lay.group)
            st.env[node] = Layout(head[0], (Seg(lay.heads, lay.n_heads, 1),))
            return
        st.env[node] = lay._replace(head_dim=head[0], dim=within[0])
        return
    got = where.get(lay.dim)
    if got is None or got[1] == "int":
        return st.unknown(node, "selects single channels")
    if got[1] == "partial":
        piece = _slice_piece(st, node, x, lay, xs, idx)
        if piece is False:
            return st.unknown(node, "slices the channel dimension")
        st.env[node] = None if piece is None else Layout(got[0], piece)
        return
    st.env[node] = Layout(got[0], lay.segs)


def _dim_item(idx: tuple[Any, ...], ndim: int, dim: int) -> Any:
    """The item of ``idx`` that indexes input dim ``dim`` (of ``ndim``)."""
    consumed = sum(1 for i in idx if i is not None and i is not Ellipsis)
    items: list[Any] = []
    for item in idx:
        if item is Ellipsis:
            items.extend([slice(None)] * (ndim - consumed))
        elif item is not None:
            items.append(item)
    items.extend([slice(None)] * (ndim - len(items)))
    return items[dim]


def _static_slice(item: Any) -> bool:
    """Whether ``item`` is a slice whose bounds and step are numbers (or omitted), not values
    computed in the graph (``x[..., :n]`` with ``n`` a node)."""
    return isinstance(item, slice) and all(
        v is None or isinstance(v, int) for v in (item.start, item.stop, item.step)
    )


def _unit_range(st: TraceState, user: fx.Node, x: fx.Node, dim: int) -> tuple[int, int] | None:
    """``(start, stop)`` of the units that ``user`` slices from ``x`` along ``dim`` with step
    1 (an exported ``aten.slice`` or ``x[..., a:b]``), else ``None``."""
    xs = st.shape(x)
    if xs is None or not user.args or user.args[0] is not x:
        return None
    target = user.target if isinstance(user.target, str) else getattr(user.target, "__name__", "")
    name = target.split(".")[0]
    if name == "slice":
        index = _slice_index(st, user)
    elif name == "getitem" and len(user.args) > 1:
        index = user.args[1] if isinstance(user.args[1], tuple) else (user.args[1],)
    else:
        return None
    if index is None or any(isinstance(i, fx.Node) for i in index):
        return None
    item = _dim_item(tuple(index), len(xs), dim)
    if not _static_slice(item):
        return None
    start, stop, step = item.indices(xs[dim])
    return (start, stop) if step == 1 and stop > start else None


def _slice_piece(
    st: TraceState, node: fx.Node, x: Any, lay: Layout, xs: tuple[int, ...], idx: tuple
) -> tuple[Seg, ...] | None | bool:
    """``x[..., a:b]`` along the unit dim where the slices of ``x`` along it tile the units
    side by side (a fused projection cut into q, k and v by slicing, as Phi-3's ``qkv_proj``):
    as ``split`` would, the group is cut into parts at the slices' bounds and this slice gets
    its part (segments; ``None``: unpermuted ones). ``False`` where not understood."""
    if not isinstance(x, fx.Node):
        return False
    item = _dim_item(idx, len(xs), lay.dim)
    if not _static_slice(item):
        return False
    start, stop, step = item.indices(xs[lay.dim])
    if step != 1:
        return False
    ranges = {r for u in x.users if (r := _unit_range(st, u, x, lay.dim)) is not None}
    ordered = sorted(ranges)
    if (start, stop) not in ranges or ordered[0][0] != 0 or ordered[-1][1] != xs[lay.dim]:
        return False
    if any(a[1] != b[0] for a, b in zip(ordered, ordered[1:])):
        return False  # overlapping or leaving a gap: not pieces side by side
    pieces = attention._cut(st, lay.segs, [b for _, b in ordered])
    if pieces is None:
        return False
    piece = pieces[ordered.index((start, stop))]
    return piece or None


def _index_stacked(
    st: TraceState, node: fx.Node, lay: Stacked, xs: tuple[int, ...], idx: tuple, where: dict
) -> None:
    """``x[i]`` of a stack of pieces (``qkv[0]``): piece ``i`` when the index picks one piece
    with an int and keeps every other dim whole, in place."""
    picked = next((i for i in idx if isinstance(i, int)), None)
    kept = all(
        where[d] == ((d if d < lay.dim else d - 1), "whole") for d in range(len(xs)) if d != lay.dim
    )
    if where.get(lay.dim, (0, ""))[1] != "int" or picked is None or not kept or None in idx:
        return st.unknown(node, "indexes a stack of fused pieces other than by piece")
    st.env[node] = lay.items[picked % len(lay.items)]


def _slice_index(st: TraceState, node: fx.Node) -> tuple[Any, ...] | None:
    """The index ``x[:, ..., start:end:step]`` that ``aten.slice(x, dim, start, end, step)``
    is (a slice covering the whole dim becomes ``:``); ``None`` if not understood."""
    x = node.args[0]
    xs = st.shape(x)
    dim, start, end, step = (st.arg(node, i, k, d) for i, k, d in _SLICE_ARGS)
    if xs is None or not all(isinstance(v, int) or v is None for v in (dim, start, end, step)):
        return None
    dim %= len(xs)
    if slice(start, end, step).indices(xs[dim]) == (0, xs[dim], 1):
        item = slice(None)
    else:
        item = slice(start, end, step)
    return (slice(None),) * dim + (item,)


_SLICE_ARGS = ((1, "dim", 0), (2, "start", None), (3, "end", None), (4, "step", 1))


def slice_(st: TraceState, node: fx.Node) -> None:
    """``aten.slice(x, dim, start, end, step)`` (an exported graph's ``x[..., a:b]``)."""
    index = _slice_index(st, node)
    if index is None:
        return st.unknown(node)
    index_value(st, node, node.args[0], index)


def select(st: TraceState, node: fx.Node) -> None:
    """``x.select(dim, i)`` / ``aten.select(x, dim, i)``: ``x[:, ..., i]`` (the dim goes away)."""
    x, dim, i = node.args[0], st.arg(node, 1, "dim"), st.arg(node, 2, "index")
    xs = st.shape(x)
    if xs is None or not isinstance(dim, int) or not isinstance(i, int):
        return st.unknown(node)
    index_value(st, node, x, (slice(None),) * (dim % len(xs)) + (i,))


def alias(st: TraceState, node: fx.Node) -> None:
    """``aten.alias(x)``: the same tensor (a state tensor stays that tensor)."""
    x = node.args[0]
    if isinstance(x, fx.Node) and x in st.leaf:
        st.leaf[node] = st.leaf[x]
        st.env[node] = None
        return
    pointwise(st, node, [x])


def _index_map(xs: tuple[int, ...], idx: tuple[Any, ...]) -> dict[int, tuple[int, str]]:
    """For each input dim of ``x[idx]``: ``(output dim, how)``, ``how`` one of ``whole``,
    ``partial`` (a slice that is not ``:``) or ``int`` (the dim is selected away)."""
    consumed = sum(1 for i in idx if i is not None and i is not Ellipsis)
    out: dict[int, tuple[int, str]] = {}
    i_in, i_out = 0, 0
    for item in idx:
        if item is None:
            i_out += 1
        elif item is Ellipsis:
            for _ in range(len(xs) - consumed):
                out[i_in] = (i_out, "whole")
                i_in += 1
                i_out += 1
        elif isinstance(item, int):
            out[i_in] = (-1, "int")
            i_in += 1
        else:
            full = (item.start, item.stop, item.step) == (None, None, None)
            out[i_in] = (i_out, "whole" if full else "partial")
            i_in += 1
            i_out += 1
    while i_in < len(xs):
        out[i_in] = (i_out, "whole")
        i_in += 1
        i_out += 1
    return out


# ---- metadata --------------------------------------------------------------------------------
def metadata(st: TraceState, node: fx.Node) -> None:
    """``x.size()``, ``x.dim()``, ...: the result does not depend on the order of units."""
    st.env[node] = None


def getattr_(st: TraceState, node: fx.Node) -> None:
    """``x.shape`` / ``x.dtype`` / ...: metadata; ``x.T``: the dims reversed; any other
    attribute is not understood."""
    if len(node.args) > 1 and node.args[1] in METADATA_ATTRS:
        st.env[node] = None
    elif len(node.args) > 1 and node.args[1] == "T":
        transpose_2d(st, node)
    else:
        st.unknown(node)


def transpose_2d(st: TraceState, node: fx.Node) -> None:
    """``x.t()`` (at most 2-D) and ``x.T`` (also as the exported ``numpy_T``): the dims
    reversed; of a 2-D state tensor, a transposed weight (:attr:`TraceState.leaf_t`)."""
    x = node.args[0]
    shape = st.shape(x)
    if shape is None:
        return st.unknown(node)
    if isinstance(x, fx.Node) and x in st.leaf and len(shape) == 2:
        st.leaf_t[node] = st.leaf[x]
        st.env[node] = None
        return
    _move_dim(st, node, list(range(len(shape)))[::-1])
