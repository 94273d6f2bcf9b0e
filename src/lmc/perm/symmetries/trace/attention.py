"""Handlers for attention: heads, products of computed tensors, fused projections cut apart.

- A reshape that cuts a unit dim of ``H * d`` units into ``(H, d)`` (``q.view(B, T, H, d)``)
  *splits into heads*: the value gets a :class:`HeadLayout` and its group is nested in a head
  group of ``H`` units (a new one, or the one it already has). Transposes, permutes, indexing
  that keeps both dims whole and elementwise ops carry it; the reverse reshape
  (``.transpose(1, 2).reshape(B, T, H * d)``) merges it back into a plain layout.
- A product of computed tensors (``q @ k.transpose(-2, -1)``, ``attn @ v``,
  ``F.scaled_dot_product_attention``) is solved like an einsum: every output dim and every
  contracted dim is a *slot*; what the operands carry in one slot must be one group (united),
  and a group that meets a fixed operand of full size in a slot is frozen. So q and k share
  their within-head dims, the scores carry the head group, and ``attn @ v`` gives v's dims,
  still split into heads.
- A position-dependent map on the dims within heads (rotary embeddings: ``q * cos``, slices
  of the head dims) leaves those dims in place, with a warning; whole heads still move. So does
  a reduction over each head's dims (a norm per head: Qwen3's q/k norms). Interleaved rotary
  embeddings (GPT-J's ``rotate_every_two``: ``torch.stack((-x[..., 1::2], x[..., ::2]),
  -1).flatten(-2)``) stack such slices of one value's heads along a new dim: whole heads
  still move (:func:`stack`), the dims within them stay in place.
- One key/value head (multi-query attention) is split into a head of its own: viewed as one
  (``k.view(B, T, 1, d)``, where the view feeds attention: :mod:`.attention_inputs`), cut off
  a fused projection without a view (``(B, 1, T, d)``) and repeated for the query heads
  (``repeat_kv``'s ``expand``, or ``enable_gqa``), or cut off a view of all heads (Falcon's
  ``qkv.view(B, T, H + 2, d).split([H, 1, 1], dim=-2)``, where nothing else reads that view's
  heads). The query heads then move in one block with it, i.e. not at all, and the dims within
  it stay in place (:mod:`lmc.perm.symmetries.within_heads` finds the maps within it).
- ``chunk`` / ``split`` along the units cut a group into parts (a fused qkv projection).
- A fused projection viewed as pieces side by side (``qkv.view(B, T, 3, H, d)``, timm's
  ``reshape(B, N, 3, H, d).permute(2, 0, 3, 1, 4)``) is a *stack*: its units are cut into the
  pieces (as ``chunk`` would) and each piece split into heads; permutes move the stack, and
  ``unbind`` along the stack dim or an int index there (``qkv[0]``, ``qkv[:, :, i]``) gives
  the pieces. Any other use of a stack freezes it.
- ``nn.MultiheadAttention`` is followed as a whole: q/k and v/out-projection dims nested in
  its heads, ``in_proj_weight`` (or ``q/k/v_proj_weight``) reading its inputs.
"""

from __future__ import annotations

import math
from typing import Any

from torch import fx
from torch.fx.passes.shape_prop import TensorMetadata

from .names import op_name
from .state import (
    UNBOUND,
    HeadLayout,
    Items,
    LayerRecord,
    Layout,
    Seg,
    Stacked,
    TraceState,
    reshape_layout,
)


def _head_message(st: TraceState, node: fx.Node, why: str) -> None:
    t = node.target
    target = t if isinstance(t, str) else getattr(t, "__name__", repr(t))
    st.messages.append(
        f"lmc.perm: node {node.name!r} ({node.op} {target}) {why}; the dims within each "
        "attention head stay unpermuted there (whole heads still move)"
    )


def _freeze_layout(st: TraceState, lay: Any) -> None:
    if lay is not None:
        st.freeze_segs(lay.segs)


# ---- reshapes ----------------------------------------------------------------------------------
def _survives(xs: tuple[int, ...], out: tuple[int, ...], k: int) -> int | None:
    """The output dim that is input dim ``k`` unchanged (same size, same prefix product)."""
    prefix = math.prod(xs[:k])
    for e in range(len(out)):
        if out[e] == xs[k] and math.prod(out[:e]) == prefix and (xs[k] != 1 or e == k):
            return e
    return None


def split_heads(st: TraceState, node: fx.Node, x: Any, lay: Layout) -> bool:
    """``(..., H * d, ...) -> (..., H, d, ...)``: a plain one-group dim cut into heads."""
    xs, out = st.shape(x), st.shape(node)
    if xs is None or out is None or len(lay.segs) != 1:
        return False
    seg = lay.segs[0]
    if seg.group is None or seg.repeat != 1:
        return False
    prefix, suffix = math.prod(xs[: lay.dim]), math.prod(xs[lay.dim + 1 :])
    for e in range(len(out) - 1):
        h, d = out[e], out[e + 1]
        if (
            h > 1
            and h * d == xs[lay.dim]
            and math.prod(out[:e]) == prefix
            and math.prod(out[e + 2 :]) == suffix
        ):
            label = f"{st.uf.name[st.uf.find(seg.group)]}.heads"
            head = st.uf.nest_in(seg.group, h, label)
            if head is None:
                return False
            st.env[node] = HeadLayout(e, e + 1, seg.group, head, h, d)
            return True
    return False


def _one_head(st: TraceState, lay: Any, shape: tuple[int, ...] | None, head_dim: int) -> Any:
    """The layout of one key/value head for a value whose units, one fresh group (not frozen,
    nested, cut or in blocks), lie on its last dim and whose dim ``head_dim`` has size 1: its
    group nested in a new head group of one unit; else ``None``."""
    if not isinstance(lay, Layout) or shape is None or lay.dim != len(shape) - 1:
        return None
    if shape[head_dim] != 1 or len(lay.segs) != 1:
        return None
    seg = lay.segs[0]
    if seg.group is None or seg.repeat != 1:
        return None
    r = st.uf.find(seg.group)
    if st.uf.is_frozen(r) or st.uf.nest[r] or st.uf.parts[r] or st.uf.coarse[r]:
        return None
    head = st.uf.nest_in(seg.group, 1, f"{st.uf.name[r]}.heads")
    if head is None:
        return None
    return HeadLayout(head_dim % len(shape), len(shape) - 1, seg.group, head, 1, shape[-1])


def split_one_head(st: TraceState, node: fx.Node, x: Any, lay: Layout) -> bool:
    """``(..., T, d) -> (..., T, 1, d)`` by ``view`` / ``reshape`` (three dims at least) of a
    value that feeds attention (``st.feeds_attention``): one key/value head of multi-query
    attention (``k.view(B, T, kv_heads, d)`` with ``kv_heads = 1``), split into a head of its
    own as :func:`split_heads` splits several, so that rotary embeddings or a norm per head
    leave its dims in place instead of freezing them. Elsewhere such a view is a plain
    reshape (``False``)."""
    if node not in st.feeds_attention or op_name(node) not in ("view", "reshape", "_unsafe_view"):
        return False
    xs, out = st.shape(x), st.shape(node)
    if xs is None or out is None or len(xs) < 3 or tuple(out) != (*xs[:-1], 1, xs[-1]):
        return False
    if lay.dim != len(xs) - 1:
        return False
    one = _one_head(st, Layout(len(out) - 1, lay.segs), out, len(out) - 2)
    if one is None:
        return False
    st.env[node] = one
    return True


def _promote_one_head(st: TraceState, value: Any, head_dim: int) -> None:
    """Give a value of one head that no view split (GPTBigCode's key, ``qkv.unsqueeze(1)`` cut
    apart: ``(B, 1, T, d)``) the layout :func:`split_one_head` would (:func:`_one_head`)."""
    one = _one_head(st, st.layout(value), st.shape(value), head_dim)
    if one is not None:
        st.env[value] = one


def repeats_one_head(st: TraceState, x: Any, out: tuple[int, ...]) -> bool:
    """Whether ``x.expand(out)`` repeats one key/value head for every query head as
    ``repeat_kv`` does (``k[:, :, None].expand(B, 1, H, T, d)``, five dims) where ``k`` was
    never split by a view (GPTBigCode's ``qkv.unsqueeze(1)`` cut apart); if so, ``x`` is given
    the layout of one head (:func:`_promote_one_head`)."""
    xs = st.shape(x)
    if xs is None or len(xs) != 5 or len(out) != 5 or xs[1] != 1 or xs[2] != 1 or out[2] < 2:
        return False
    _promote_one_head(st, x, 1)
    return isinstance(st.env.get(x), HeadLayout)


def reduce_heads(st: TraceState, node: fx.Node, lay: HeadLayout, dims: list[int]) -> None:
    """A reduction of a value split into heads over ``dims`` (non-negative): over the dims
    within heads (and others, not the heads), a statistic per head (the mean square of an
    RMSNorm over each head, Qwen3's q/k norms): the dims within heads stay in place, whole
    heads move; over other dims only, both move down; over the heads, not followed."""
    x = node.args[0]
    xs, out = st.shape(x), st.shape(node)
    if lay.head_dim in dims:
        return st.unknown(node, "reduces over attention heads")
    keep = len(out) == len(xs)

    def moved(k: int) -> int:
        return k if keep else k - sum(d < k for d in dims)

    if lay.dim in dims:
        _head_message(st, node, "reduces over the dims within each head")
        st.uf.freeze_within(lay.group)
        st.env[node] = Layout(moved(lay.head_dim), (Seg(lay.heads, lay.n_heads, 1),))
        return
    hd, wd = moved(lay.head_dim), moved(lay.dim)
    if out[hd] != lay.n_heads or out[wd] != lay.d:
        return st.unknown(node)
    st.env[node] = lay._replace(head_dim=hd, dim=wd)


def stack_pieces(st: TraceState, node: fx.Node, x: Any, lay: Layout) -> bool:
    """``(..., K * C, ...) -> (..., K, C, ...)`` or ``(..., K, H, d, ...)`` with ``C = H * d``:
    a fused projection's units viewed as ``K`` pieces side by side (``qkv.view(B, T, 3, H,
    d)``). The units are cut into ``K`` parts of ``C`` (as ``chunk`` would) and each part,
    split into heads if the view asks, becomes a piece of a :class:`Stacked` layout."""
    xs, out = st.shape(x), st.shape(node)
    if xs is None or out is None:
        return False
    prefix, suffix, total = math.prod(xs[: lay.dim]), math.prod(xs[lay.dim + 1 :]), xs[lay.dim]
    for e in range(len(out) - 1):
        k = out[e]
        if k < 2 or total % k or math.prod(out[:e]) != prefix:
            continue
        size, rest = total // k, out[e + 1 :]
        heads = None
        if rest[0] == size and math.prod(rest[1:]) == suffix:
            pass
        elif len(rest) >= 2 and rest[0] > 1 and rest[0] * rest[1] == size:
            if math.prod(rest[2:]) != suffix or suffix != 1:
                continue
            heads = (rest[0], rest[1])
        else:
            continue
        pieces = _cut(st, lay.segs, [size * (i + 1) for i in range(k)])
        if pieces is None:
            return False
        items: list[Any] = []
        for piece in pieces:
            if heads is None:
                items.append(Layout(e, piece))
                continue
            if len(piece) != 1 or piece[0].group is None or piece[0].repeat != 1:
                return False
            group = piece[0].group
            head = st.uf.nest_in(group, heads[0], f"{st.uf.name[st.uf.find(group)]}.heads")
            if head is None:
                return False
            items.append(HeadLayout(e, e + 1, group, head, heads[0], heads[1]))
        st.env[node] = Stacked(e, tuple(items))
        return True
    return False


def move_stacked(lay: Stacked, pos: list[int]) -> Stacked:
    """``lay`` after a permute putting old dim ``pos[i]`` at new dim ``i``."""
    new_stack = pos.index(lay.dim)

    def moved(j: int) -> int:  # a piece's dim j, in the pieces' numbering, after the move
        full = pos.index(j if j < lay.dim else j + 1)
        return full if full < new_stack else full - 1

    items = []
    for item in lay.items:
        if isinstance(item, HeadLayout):
            items.append(item._replace(head_dim=moved(item.head_dim), dim=moved(item.dim)))
        else:
            items.append(Layout(moved(item.dim), item.segs))
    return Stacked(new_stack, tuple(items))


def reshape_heads(st: TraceState, node: fx.Node, x: Any, lay: HeadLayout) -> None:
    """A reshape of a value split into heads: merge them back, or keep both dims whole."""
    xs, out = st.shape(x), st.shape(node)
    if lay.dim == lay.head_dim + 1:
        prefix, suffix = math.prod(xs[: lay.head_dim]), math.prod(xs[lay.dim + 1 :])
        for e in range(len(out)):
            if (
                out[e] == lay.n_heads * lay.d
                and math.prod(out[:e]) == prefix
                and math.prod(out[e + 1 :]) == suffix
            ):
                st.env[node] = Layout(e, (Seg(lay.group, lay.n_heads * lay.d, 1),))
                return
    eh, ew = _survives(xs, out, lay.head_dim), _survives(xs, out, lay.dim)
    if eh is not None and ew is not None and eh != ew:
        st.env[node] = lay._replace(head_dim=eh, dim=ew)
        return
    heads = reshape_layout(xs, out, Layout(lay.head_dim, (Seg(lay.heads, lay.n_heads, 1),)))
    if heads is not None:  # whole heads stay whole (repeated key/value heads: repeat_kv)
        _head_message(st, node, "merges the dims within heads with other dims")
        st.uf.freeze_within(lay.group)
        st.env[node] = heads
        return
    st.unknown(node, "reshapes the channel dimension into pieces (attention heads not followed)")


# ---- elementwise ops on heads ------------------------------------------------------------------
def pointwise_heads(st: TraceState, node: fx.Node, operands: list[Any]) -> None:
    """An elementwise op with an operand split into heads (see the module docstring)."""
    out = st.shape(node)
    operands = [o for o in operands if st.shape(o) is not None]
    nd = len(out)
    heads: list[HeadLayout] = []
    plains: list[tuple[int, tuple[Seg, ...]]] = []
    fixed: list[Any] = []
    for op in operands:
        lay, shift = st.layout(op), nd - len(st.shape(op))
        if isinstance(lay, HeadLayout):
            heads.append(lay._replace(head_dim=lay.head_dim + shift, dim=lay.dim + shift))
        elif isinstance(lay, Layout):
            plains.append((lay.dim + shift, lay.segs))
        else:
            fixed.append(op)
    first = heads[0]
    hd, wd = first.head_dim, first.dim

    def give_up(why: str) -> None:
        for h in heads:
            st.freeze_segs(h.segs)
        for _, segs in plains:
            st.freeze_segs(segs)
        for op in fixed:
            st.fix_leaf(op)
        st.warn(node, why)
        st.env[node] = None

    if any((h.head_dim, h.dim) != (hd, wd) for h in heads) or out[hd] != first.n_heads:
        return give_up("combines attention heads laid out differently")
    within_ok = True
    for dim, segs in plains:
        if dim != hd or sum(s.extent for s in segs) != first.n_heads:
            return give_up("combines attention heads with other permuted units")
        within_ok = False  # heads-only: no order within heads to follow
    for op in fixed:
        shp = st.shape(op)
        kh, kw = hd - (nd - len(shp)), wd - (nd - len(shp))
        if kh >= 0 and shp[kh] > 1:
            return give_up("combines attention heads with a fixed tensor")
        if kw >= 0 and shp[kw] > 1:
            if within_ok and st.live_groups((Seg(first.group, 1, 1),)):
                _head_message(st, node, "applies a position-dependent map to the head dims")
            within_ok = False
        st.fix_leaf(op)
    head_segs = (Seg(first.heads, first.n_heads, 1),)
    for h in heads[1:]:
        st.uf.union(first.group, h.group)
        st.uf.union(first.heads, h.heads)
    for _, segs in plains:
        st.unify(head_segs, segs)
    if not within_ok:
        st.uf.freeze_within(first.group)
        st.env[node] = Layout(hd, head_segs)
    else:
        st.env[node] = first


def _keeps_dims_within(st: TraceState, group: int) -> bool:
    """Whether ``group`` is a head group whose nested groups all keep their dims within heads
    in place (or stay unpermuted): a value that carries it alone is a slice of those dims."""
    uf, h = st.uf, st.uf.find(group)
    nested = [
        r
        for r in range(len(uf.parent))
        if uf.parent[r] == r and uf.nest[r] is not None and uf.find(uf.nest[r][0]) == h
    ]
    return bool(nested) and all(uf.within_frozen[r] or uf.frozen[r] for r in nested)


def stack(st: TraceState, node: fx.Node) -> None:
    """``torch.stack(tensors, dim)`` of pieces of one value's heads whose dims within heads
    stay in place (interleaved rotary embeddings: ``torch.stack((-x[..., 1::2], x[..., ::2]),
    dim=-1)``, each piece a slice of the dims within heads carrying only the head group): the
    result carries the head group (its dim one further on where the new dim comes before it),
    so whole heads still move, with a warning. Any other stack is not understood: what flows
    in stays unpermuted, with the warning of any op without a handler."""
    tensors, dim = st.arg(node, 0, "tensors"), st.arg(node, 1, "dim", None)
    if dim is None:  # torch.stack takes ``axis`` for ``dim`` too
        dim = node.kwargs.get("axis", 0)
    out = st.shape(node)
    if out is None or not isinstance(dim, int) or not isinstance(tensors, (list, tuple)):
        return st.unknown(node)
    lays = [st.layout(t) for t in tensors]
    first = lays[0] if lays else None
    if type(first) is not Layout or len(first.segs) != 1:
        return st.unknown(node)
    seg = first.segs[0]
    if seg.group is None or seg.repeat != 1 or not _keeps_dims_within(st, seg.group):
        return st.unknown(node)
    for lay in lays[1:]:
        if type(lay) is not Layout or lay.dim != first.dim or len(lay.segs) != 1:
            return st.unknown(node)
        other = lay.segs[0]
        if other.group is None or other.size != seg.size or other.repeat != 1:
            return st.unknown(node)
        if st.uf.find(other.group) != st.uf.find(seg.group):
            return st.unknown(node)
    e = first.dim + (first.dim >= dim % len(out))
    if out[e] != seg.size:
        return st.unknown(node)
    if st.live_groups(first.segs):
        _head_message(st, node, "stacks slices of the dims within heads")
    st.env[node] = Layout(e, first.segs)


# ---- products of computed tensors --------------------------------------------------------------
def _carriers(
    st: TraceState, value: Any, roles: list[Any], slots: dict[Any, list], lay: Any
) -> None:
    """Add what each dim of ``value`` (of layout ``lay``) carries to its slot (``roles[k]``:
    the slot of dim ``k``)."""
    shape = st.shape(value)
    if lay is not None and not isinstance(lay, (Layout, HeadLayout)):
        lay = None  # a tuple or a stack is never multiplied: nothing to carry
    for k, role in enumerate(roles):
        if isinstance(lay, HeadLayout) and k == lay.head_dim:
            slots[role].append(("segs", (Seg(lay.heads, lay.n_heads, 1),)))
        elif isinstance(lay, HeadLayout) and k == lay.dim:
            slots[role].append(("within", lay))
        elif isinstance(lay, Layout) and k == lay.dim:
            slots[role].append(("segs", lay.segs))
        elif shape[k] > 1:
            slots[role].append(("fixed", None))


def _solve(
    st: TraceState,
    node: fx.Node,
    operands: list[tuple[Any, list[Any]]],
    override: dict[Any, Any] | None = None,
) -> None:
    """Unite what each slot carries; give ``node`` the layout of its output slots
    (``override``: the layout an operand is read with, where not its own)."""
    out = st.shape(node)
    slots: dict[Any, list] = {}
    override = override or {}
    for _, roles in operands:
        for r in roles:
            slots.setdefault(r, [])
    for value, roles in operands:
        lay = override[value] if value in override else st.layout(value)
        _carriers(st, value, roles, slots, lay)
    carried: dict[Any, tuple[str, Any]] = {}
    for slot, items in slots.items():
        kinds = {kind for kind, _ in items}
        live = [(kind, c) for kind, c in items if kind != "fixed"]
        if not live:
            continue
        if "fixed" in kinds or ("within" in kinds and "segs" in kinds):
            for kind, c in live:
                if kind == "within":
                    if st.live_groups((Seg(c.group, 1, 1),)):
                        _head_message(st, node, "multiplies the head dims with a fixed tensor")
                    st.uf.freeze_within(c.group)
                else:
                    if st.live_groups(c):
                        st.warn(node, "multiplies permuted units with a fixed tensor")
                    st.freeze_segs(c)
            continue
        kind, first = live[0]
        for _, c in live[1:]:
            if kind == "within":
                st.uf.union(first.group, c.group)
                continue
            was_live = st.live_groups(first) or st.live_groups(c)
            if not st.unify(first, c) and was_live:  # heads of different counts (a broadcast)
                st.warn(node, "multiplies permuted units that do not line up")
        carried[slot] = (kind, first)
    outputs = {s: v for s, v in carried.items() if isinstance(s, int)}
    within = [(s, c) for s, (k, c) in outputs.items() if k == "within"]
    plain = [(s, c) for s, (k, c) in outputs.items() if k == "segs"]
    within = [(s, c) for s, c in within if not st.uf.within_frozen[st.uf.find(c.group)]]
    if len(within) == 1 and len(plain) == 1:
        (ws, w), (hs, segs) = within[0], plain[0]
        if (
            len(segs) == 1
            and segs[0].group is not None
            and st.uf.find(segs[0].group) == st.uf.find(w.heads)
        ):
            st.env[node] = HeadLayout(
                hs % len(out), ws % len(out), w.group, w.heads, w.n_heads, w.d
            )
            return
    if not within and len(plain) == 1:
        s, segs = plain[0]
        if out[s % len(out)] == sum(x.extent for x in segs):
            st.env[node] = Layout(s % len(out), segs)
            return
    if not within and not plain:
        st.env[node] = None
        return
    for _, c in within:
        st.freeze_segs(c.segs)
    for _, c in plain:
        st.freeze_segs(c)
    st.warn(node, "gives a product whose units are laid out in a way not followed")
    st.env[node] = None


def matmul_values(st: TraceState, node: fx.Node, x: Any, y: Any) -> None:
    """``x @ y`` of two computed tensors (at least 2-D each)."""
    xs, ys, out = st.shape(x), st.shape(y), st.shape(node)
    if xs is None or ys is None or out is None or len(xs) < 2 or len(ys) < 2:
        return st.unknown(node, "multiplies two computed tensors")
    nd = len(out)
    rx = [nd - 2 - (len(xs) - 2) + k for k in range(len(xs) - 2)] + [nd - 2, "k"]
    ry = [nd - 2 - (len(ys) - 2) + k for k in range(len(ys) - 2)] + ["k", nd - 1]
    _solve(st, node, [(x, rx), (y, ry)])


def repeated(st: TraceState, node: fx.Node, x: Any, dim: int, times: int) -> Any:
    """The layout of ``x.repeat_interleave(times, dim)`` (each index of ``dim`` repeated
    ``times`` times in a row), or ``False`` where it is not followed. Along a value's unit
    dim each unit becomes ``times`` times wider; repeating heads (grouped-query attention's
    key/value heads) keeps whole heads and leaves the dims within them in place."""
    lay = st.layout(x)
    if lay is None:
        return None
    if isinstance(lay, HeadLayout):
        if dim == lay.dim:
            return False
        if dim != lay.head_dim:
            return lay
        _head_message(st, node, "repeats attention heads")
        st.uf.freeze_within(lay.group)
        lay = st.layout(x)
        if lay is None:
            return None
    if not isinstance(lay, Layout):
        return False
    if dim != lay.dim:
        return lay
    return Layout(dim, tuple(Seg(s.group, s.size, s.repeat * times) for s in lay.segs))


def repeat_interleave(st: TraceState, node: fx.Node) -> None:
    """``x.repeat_interleave(r, dim)`` / ``torch.repeat_interleave(x, r, dim)`` with an int
    ``r`` and ``dim`` (see :func:`repeated`); tensor repeats or no ``dim`` are not followed."""
    x, times, dim = node.args[0], st.arg(node, 1, "repeats"), st.arg(node, 2, "dim")
    xs = st.shape(x)
    if xs is None or not isinstance(times, int) or not isinstance(dim, int):
        return st.unknown(node, "repeats values in a way not followed")
    lay = repeated(st, node, x, dim % len(xs), times)
    if lay is False:
        return st.unknown(node, "repeats values in a way not followed")
    if lay is None:
        return st.unpermuted(node, x)
    st.env[node] = lay


def sdpa(st: TraceState, node: fx.Node) -> None:
    """``F.scaled_dot_product_attention(q, k, v, attn_mask, ...)``: softmax(q kᵀ) v. With
    ``enable_gqa`` and fewer key/value heads than query heads, k and v are read as repeated
    for the query heads that share them (:func:`repeated`), as ``repeat_kv`` would."""
    q, k, v = (st.arg(node, i, key) for i, key in enumerate(("query", "key", "value")))
    mask = st.arg(node, 3, "attn_mask")
    out = st.shape(node)
    shapes = [st.shape(t) for t in (q, k, v)]
    if out is None or any(s is None or len(s) < 2 for s in shapes):
        return st.unknown(node)
    nd = len(out)
    override: dict[Any, Any] = {}
    if node.kwargs.get("enable_gqa") and shapes[1][-3] != shapes[0][-3]:
        n_q, n_kv = shapes[0][-3], shapes[1][-3]
        if n_q % n_kv or shapes[2][-3] != n_kv:
            return st.unknown(node, "groups query heads over shared key/value heads")
        if n_kv == 1 and isinstance(st.env.get(q), HeadLayout):  # multi-query attention
            for t in (k, v):
                _promote_one_head(st, t, len(st.shape(t)) - 3)
        for t in (k, v):
            lay = repeated(st, node, t, len(st.shape(t)) - 3, n_q // n_kv)
            if lay is False:
                return st.unknown(node, "groups query heads over shared key/value heads")
            override[t] = lay

    def batch(shape: tuple[int, ...], tail: list[Any]) -> list[Any]:
        nb = len(shape) - 2
        return [nd - 2 - nb + j for j in range(nb)] + tail

    operands = [
        (q, batch(shapes[0], [nd - 2, "qk"])),
        (k, batch(shapes[1], ["s", "qk"])),
        (v, batch(shapes[2], ["s", nd - 1])),
    ]
    if isinstance(mask, fx.Node) and st.shape(mask) is not None:
        ms = st.shape(mask)
        if len(ms) >= 2:
            operands.append((mask, batch(ms, [nd - 2, "s"])))
        st.fix_leaf(mask)
    _solve(st, node, operands, override)


# ---- cutting the units -------------------------------------------------------------------------
def _piece_sizes(st: TraceState, node: fx.Node, dim: int) -> list[int] | None:
    meta = node.meta.get("tensor_meta")
    if not isinstance(meta, (tuple, list)) or not all(isinstance(m, TensorMetadata) for m in meta):
        return None
    return [int(m.shape[dim]) for m in meta]


def _cut(st: TraceState, segs: tuple[Seg, ...], bounds: list[int]) -> list[tuple[Seg, ...]] | None:
    """Re-tile ``segs`` into pieces ending at ``bounds`` (cumulative), cutting groups into
    parts where a piece ends inside a segment; ``None`` where a unit would be cut apart."""
    pieces: list[list[Seg]] = [[] for _ in bounds]
    offset = 0
    starts = [0, *bounds[:-1]]
    for seg in segs:
        lo, hi = offset, offset + seg.extent
        cuts = sorted({b for b in bounds if lo < b < hi})
        if any((c - lo) % seg.repeat for c in cuts):
            return None
        edges = [lo, *cuts, hi]
        units = [(b - a) // seg.repeat for a, b in zip(edges, edges[1:])]
        if seg.group is None or len(units) == 1:
            groups = [seg.group] * len(units)
        else:
            parts = st.uf.split(seg.group, units, st.uf.name[st.uf.find(seg.group)])
            if parts is None:
                return None
            groups = list(parts)
        for (a, _), n, g in zip(zip(edges, edges[1:]), units, groups):
            piece = max(i for i, s in enumerate(starts) if s <= a)
            pieces[piece].append(Seg(g, n, seg.repeat))
        offset = hi
    return [tuple(p) for p in pieces]


def _fresh_heads(st: TraceState, lay: HeadLayout) -> bool:
    """Whether the heads of ``lay`` were just split off its group, by one view, and nothing
    else has been said of them: the head group is in no union, nor frozen, cut or in blocks;
    the group is nested in it alone, its dims within heads free."""
    uf = st.uf
    r, h = uf.find(lay.group), uf.find(lay.heads)
    if uf.nest[r] is None or uf.find(uf.nest[r][0]) != h or uf.within_frozen[r]:
        return False
    if uf.frozen[r] or uf.parts[r] or uf.coarse[r] or uf.frozen[h] or uf.parts[h]:
        return False
    if uf.coarse[h] or uf.nest[h]:
        return False
    others = sum(1 for i in range(len(uf.parent)) if uf.find(i) == h)
    nested = sum(1 for i in range(len(uf.parent)) if uf.nest[i] and uf.find(uf.nest[i][0]) == h)
    return others == 1 and nested == 1


def _read_only_by(st: TraceState, node: fx.Node, heads: int) -> bool:
    """Whether the head group ``heads`` can reach nothing but ``node``: every value the walk
    gave it to has one reader, ``node`` or another such value (the view into heads, the ops
    that carry its layout to ``node``), and no state tensor is bound to it. Then giving those
    heads up for others at ``node`` changes nothing anything else reads."""
    h = st.uf.find(heads)

    def carries(lay: Any) -> bool:
        return lay is not None and any(
            s.group is not None and st.uf.find(s.group) == h for s in lay.segs
        )

    carriers = {n for n, lay in st.env.items() if carries(lay)}
    for n in carriers:
        if len(n.users) != 1 or next(iter(n.users)) not in carriers | {node}:
            return False
    return not any(
        entry is not UNBOUND and carries(Layout(0, entry))
        for row in st.bind_map.values()
        for entry in row
        if entry is not None
    )


def _cut_heads(st: TraceState, node: fx.Node, lay: HeadLayout, sizes: list[int] | None) -> bool:
    """``split`` of a value split into heads along its heads (Falcon's multi-query
    ``qkv.view(B, T, H + 2, d).split([H, 1, 1], dim=-2)``: the query heads, one key head, one
    value head): where the heads were just split off a group by one view
    (:func:`_fresh_heads`), that group is cut into the pieces instead (as ``chunk`` of its
    units would), and each piece split into its own heads, where nothing but this ``split``
    reads the heads of the view (:func:`_read_only_by`: the heads given up would otherwise
    still move what else reads them, and the group no longer with them). Otherwise not
    followed."""
    if not sizes or len(sizes) < 2 or sum(sizes) != lay.n_heads or not _fresh_heads(st, lay):
        return False
    if not _read_only_by(st, node, lay.heads):
        return False
    r = st.uf.find(lay.group)
    st.uf.nest[r] = None  # the heads of the whole view are given up for the pieces' own
    parts = st.uf.split(lay.group, [n * lay.d for n in sizes], st.uf.name[r])
    if parts is None:
        return False
    items: list[Any] = []
    for part, n in zip(parts, sizes):
        head = st.uf.nest_in(part, n, f"{st.uf.name[st.uf.find(part)]}.heads")
        if head is None:
            return False
        items.append(HeadLayout(lay.head_dim, lay.dim, part, head, n, lay.d))
    st.env[node] = Items(items)
    return True


def chunk(st: TraceState, node: fx.Node) -> None:
    """``chunk`` / ``split`` (a tuple of pieces along ``dim``) and ``unbind``."""
    x = node.args[0]
    lay, xs = st.layout(x), st.shape(x)
    name = node.target if isinstance(node.target, str) else node.target.__name__
    dim = st.arg(node, 1 if name == "unbind" else 2, "dim", 0)
    if xs is None or not isinstance(dim, int):
        return st.unknown(node)
    dim %= len(xs)
    if lay is None:
        return st.unpermuted(node, x)
    if isinstance(lay, Stacked):
        if name == "unbind" and dim == lay.dim:
            st.env[node] = Items(lay.items)
            return
        return st.unknown(node, "cuts a stack of fused pieces other than into its pieces")
    sizes = None if name == "unbind" else _piece_sizes(st, node, dim)
    if name != "unbind" and sizes is None:
        return st.unknown(node)
    count = xs[dim] if name == "unbind" else len(sizes)
    shift = (lambda k: k - (k > dim)) if name == "unbind" else (lambda k: k)
    if isinstance(lay, HeadLayout):
        if dim == lay.head_dim and name != "unbind" and _cut_heads(st, node, lay, sizes):
            return
        if dim == lay.head_dim or (dim == lay.dim and name == "unbind"):
            return st.unknown(node, "cuts attention heads apart")
        if dim == lay.dim:
            _head_message(st, node, "cuts the dims within heads apart")
            st.uf.freeze_within(lay.group)
            item = Layout(lay.head_dim, (Seg(lay.heads, lay.n_heads, 1),))
            st.env[node] = Items([item] * count)
            return
        item = lay._replace(head_dim=shift(lay.head_dim), dim=shift(lay.dim))
        st.env[node] = Items([item] * count)
        return
    if not isinstance(lay, Layout):
        return st.unknown(node)
    if dim != lay.dim:
        st.env[node] = Items([Layout(shift(lay.dim), lay.segs)] * count)
        return
    if name == "unbind":
        return st.unknown(node, "selects single channels")
    bounds = [sum(sizes[: i + 1]) for i in range(len(sizes))]
    pieces = _cut(st, lay.segs, bounds)
    if pieces is None:
        return st.unknown(node, "cuts channels apart")
    st.env[node] = Items([Layout(dim, p) if p else None for p in pieces])


# ---- layers ------------------------------------------------------------------------------------
def _input_segs(st: TraceState, x: Any) -> tuple[Seg, ...] | None:
    """The segments of a value read by a dense layer over its last dim (else frozen: None)."""
    lay, xs = st.layout(x), st.shape(x)
    if isinstance(lay, Layout) and xs is not None and lay.dim == len(xs) - 1:
        return lay.segs
    _freeze_layout(st, lay)
    return None


def multihead_attention_module(st: TraceState, node: fx.Node) -> None:
    """``nn.MultiheadAttention(query, key, value, ...)``, self- or cross-attention, batch first
    or not, fused ``in_proj_weight`` or separate ``q/k/v_proj_weight``, optional bias and
    ``bias_k`` / ``bias_v``. A 3-D (per-head) ``attn_mask`` keeps the heads in place."""
    mod = st.module(node)
    name = str(node.target)
    query, key, value = (st.arg(node, i, k) for i, k in enumerate(("query", "key", "value")))
    e, h = mod.embed_dim, mod.num_heads
    qk = st.uf.new(e, f"{name}.qk")
    vo = st.uf.new(e, f"{name}.vo")
    heads = st.uf.nest_in(qk, h, f"{name}.heads")
    st.uf.nest[st.uf.find(vo)] = (heads, h)
    s_qk, s_vo = (Seg(qk, e, 1),), (Seg(vo, e, 1),)
    ins = [_input_segs(st, t) for t in (query, key, value)]
    if mod._qkv_same_embed_dim:
        w = f"{name}.in_proj_weight"
        st.bind(w, 0, s_qk + s_qk + s_vo)
        for segs in ins:
            st.bind(w, 1, segs)
        if isinstance(query, fx.Node) and st.shape(query) is not None:
            bias = f"{name}.in_proj_bias" if mod.in_proj_bias is not None else None
            st.consumers.append(
                LayerRecord(w, 1, query.name, len(st.shape(query)) - 1, node.name, bias)
            )
    else:
        for t, proj, segs, out in zip((query, key, value), "qkv", ins, (s_qk, s_qk, s_vo)):
            w = f"{name}.{proj}_proj_weight"
            st.bind(w, 0, out)
            st.bind(w, 1, segs)
            if isinstance(t, fx.Node) and st.shape(t) is not None:
                st.consumers.append(LayerRecord(w, 1, t.name, len(st.shape(t)) - 1, node.name))
    if mod.in_proj_bias is not None:
        st.bind(f"{name}.in_proj_bias", 0, s_qk + s_qk + s_vo)
    for b, segs in (("bias_k", s_qk), ("bias_v", s_vo)):
        if getattr(mod, b) is not None:
            st.bind(f"{name}.{b}", 0, None)
            st.bind(f"{name}.{b}", 1, None)
            st.bind(f"{name}.{b}", 2, segs)
    st.bind(f"{name}.out_proj.weight", 1, s_vo)
    out_segs = st.open_group(f"{name}.out_proj.weight", 0, e, f"{name}.out_proj")
    if mod.out_proj.bias is not None:
        st.bind(f"{name}.out_proj.bias", 0, out_segs)
    mask = st.arg(node, 5, "attn_mask")
    if isinstance(mask, fx.Node):
        ms = st.shape(mask)
        if (
            ms is not None
            and len(ms) == 3
            and heads is not None
            and st.live_groups((Seg(heads, h, 1),))
        ):
            st.warn(node, "has a per-head attention mask (heads keep their order)")
            st.uf.freeze(heads)
        st.fix_leaf(mask)
    meta = node.meta.get("tensor_meta")
    outs = meta if isinstance(meta, (tuple, list)) else ()
    first = outs[0] if outs and isinstance(outs[0], TensorMetadata) else None
    out_lay = Layout(len(first.shape) - 1, out_segs) if first is not None and out_segs else None
    weights = None
    second = outs[1] if len(outs) > 1 and isinstance(outs[1], TensorMetadata) else None
    if second is not None and first is not None and len(second.shape) == len(first.shape) + 1:
        if heads is not None:  # per-head weights (average_attn_weights=False)
            weights = Layout(len(second.shape) - 3, (Seg(heads, h, 1),))
    st.env[node] = Items([out_lay, weights])
