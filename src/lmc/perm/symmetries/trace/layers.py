"""Handlers of ops with state tensors: weight layers open groups, norms carry them.

A weight layer (Linear, ``x @ W``, Conv, ConvTranspose, Embedding, their functional and ATen
forms) binds its input axis to
the layout of the value it reads and *opens* a new group on its output axis (and its bias).
A norm (BatchNorm, InstanceNorm, GroupNorm(1, C) or (C, C), LayerNorm, RMSNorm, PReLU) carries
the layout of its input, binding its per-channel parameters and statistics to the group.
Module and functional forms (``nn.Linear`` and ``F.linear(x, self.w, self.b)``) share one
core; a functional form whose weight is computed rather than read from the state is refused.
``torch.addmm(b, x, W)`` (Hugging Face's ``Conv1D``) is a dense layer ``x @ W + b``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import fx

from .attention import matmul_values
from .state import LayerRecord, Layout, TraceState


def _bias_name(st: TraceState, node: fx.Node) -> str | None:
    return f"{node.target}.bias" if st.module(node).bias is not None else None


def _leaves(st: TraceState, node: fx.Node, *args: tuple[int, str]) -> list[str | None] | None:
    """The state names of optional tensor arguments (``None`` where absent); ``None`` if any
    of them is computed rather than read from the state."""
    names: list[str | None] = []
    for index, key in args:
        value = st.arg(node, index, key)
        if value is not None and value not in st.leaf:
            return None
        names.append(st.leaf.get(value) if value is not None else None)
    return names


# ---- weight layers ---------------------------------------------------------------------------
def linear(
    st: TraceState,
    node: fx.Node,
    x: Any,
    wname: str,
    bname: str | None,
    out_features: int,
    label: str,
    *,
    in_axis: int = 1,
    out_axis: int = 0,
) -> None:
    """A dense layer reading the last dim of ``x`` through ``wname``'s axis ``in_axis`` and
    writing ``out_features`` units on ``out_axis`` (``x @ W`` has them the other way)."""
    xs, lay = st.shape(x), st.layout(x)
    in_segs = None
    if lay is not None:
        if xs is not None and lay.dim == len(xs) - 1:
            in_segs = lay.segs
        else:
            st.freeze_segs(lay.segs)  # units on a batch-like dim: one layout per value
    st.bind(wname, in_axis, in_segs)
    segs = st.open_group(wname, out_axis, out_features, label)
    if bname is not None:
        st.bind(bname, 0, segs)
    out = st.shape(node)
    st.env[node] = Layout(len(out) - 1, segs) if segs and out else None
    if xs is not None:
        st.consumers.append(LayerRecord(wname, in_axis, x.name, len(xs) - 1, node.name, bname))
    if out is not None:
        st.producers.append(LayerRecord(wname, out_axis, node.name, len(out) - 1, node.name, bname))


def linear_module(st: TraceState, node: fx.Node) -> None:
    """``nn.Linear``."""
    mod = st.module(node)
    name = str(node.target)
    linear(
        st, node, st.first_arg(node), f"{name}.weight", _bias_name(st, node), mod.out_features, name
    )


def linear_function(st: TraceState, node: fx.Node) -> None:
    """``F.linear(x, weight, bias)`` with a weight (and bias) read from the state."""
    names = _leaves(st, node, (1, "weight"), (2, "bias"))
    if names is None or names[0] is None:
        return st.unknown(node, "uses a computed weight")
    wname, bname = names
    out_features = st.shapes[wname][0]
    linear(st, node, node.args[0], wname, bname, out_features, wname.removesuffix(".weight"))


def matmul(st: TraceState, node: fx.Node) -> None:
    """``x @ W`` / ``torch.matmul(x, W)`` / ``torch.mm``: a dense layer when ``W`` is a 2-D
    state tensor (or its transpose, ``x @ W.T``, as Falcon's layers compute); a product of two
    computed values (attention scores, ``attn @ v``) is solved by
    :func:`.attention.matmul_values`."""
    x, w = node.args[0], node.args[1]
    ws = st.shape(w)
    if w in st.leaf_t and x not in st.leaf and ws is not None and st.plain(x):
        wname = st.leaf_t[w]  # x @ W.T: W is (out, in), as nn.Linear's
        return linear(st, node, x, wname, None, ws[1], wname.removesuffix(".weight"))
    if w not in st.leaf and x not in st.leaf:
        return matmul_values(st, node, x, w)
    if w not in st.leaf or ws is None or len(ws) != 2 or not st.plain(x):
        return st.unknown(node, "multiplies two computed tensors")
    wname = st.leaf[w]
    linear(st, node, x, wname, None, ws[1], wname, in_axis=0, out_axis=1)


def conv(
    st: TraceState,
    node: fx.Node,
    x: Any,
    wname: str,
    bname: str | None,
    out_channels: int,
    groups: int,
    *,
    transposed: bool,
    label: str,
) -> None:
    """A convolution over channel dim 1. ``groups == 1``: a dense layer over channels;
    depthwise (``groups == in == out``): output channel ``c`` reads input channel ``c`` only,
    so both share the input's units; other grouped convolutions freeze what they touch."""
    xs, lay = st.shape(x), st.layout(x)
    in_axis, out_axis = (0, 1) if transposed else (1, 0)
    in_segs = None
    if lay is not None:
        if lay.dim == 1:
            in_segs = lay.segs
        else:
            st.freeze_segs(lay.segs)
    out = st.shape(node)
    in_channels = xs[1] if xs else None
    if groups == 1:
        st.bind(wname, in_axis, in_segs)
        segs = st.open_group(wname, out_axis, out_channels, label)
    elif groups == in_channels == out_channels and not transposed:
        st.bind(wname, in_axis, None)  # the weight's input axis has size 1
        st.bind(wname, out_axis, in_segs)
        segs = in_segs
    else:
        if st.live_groups(in_segs):
            st.warn(node, f"is a grouped convolution (groups={groups})")
        st.freeze_segs(in_segs)
        st.fix(wname)
        segs = None
    if bname is not None:
        st.bind(bname, 0, segs)
    st.env[node] = Layout(1, segs) if segs and out else None
    if xs is not None:
        st.consumers.append(LayerRecord(wname, in_axis, x.name, 1, node.name, bname))
    if out is not None:
        st.producers.append(LayerRecord(wname, out_axis, node.name, 1, node.name, bname))


def conv_module(st: TraceState, node: fx.Node) -> None:
    """``nn.Conv1d/2d/3d`` and ``nn.ConvTranspose1d/2d/3d`` (a transposed one's weight is
    ``(in, out // groups, ...)``)."""
    mod = st.module(node)
    name = str(node.target)
    conv(
        st,
        node,
        st.first_arg(node),
        f"{name}.weight",
        _bias_name(st, node),
        mod.out_channels,
        mod.groups,
        transposed=bool(mod.transposed),
        label=name,
    )


def conv_function(st: TraceState, node: fx.Node) -> None:
    """``F.conv1d/2d/3d(x, weight, bias, stride, padding, dilation, groups)``."""
    names = _leaves(st, node, (1, "weight"), (2, "bias"))
    if names is None or names[0] is None:
        return st.unknown(node, "uses a computed weight")
    wname, bname = names
    conv(
        st,
        node,
        node.args[0],
        wname,
        bname,
        st.shapes[wname][0],
        st.arg(node, 6, "groups", 1),
        transposed=False,
        label=wname.removesuffix(".weight"),
    )


def embedding_module(st: TraceState, node: fx.Node) -> None:
    """``nn.Embedding``: each row of the weight is a token's features; the feature axis opens
    a group on the last dim of the output, the vocabulary axis is never permuted."""
    mod = st.module(node)
    name = str(node.target)
    wname = f"{name}.weight"
    segs = st.open_group(wname, 1, mod.embedding_dim, name)
    st.bind(wname, 0, None)
    out = st.shape(node)
    st.env[node] = Layout(len(out) - 1, segs) if segs and out else None
    st.producers.append(LayerRecord(wname, 1, node.name, len(out or ()) - 1, node.name))


def embedding_function(st: TraceState, node: fx.Node) -> None:
    """``F.embedding(ids, weight)`` / ``aten.embedding(weight, ids)``: as ``nn.Embedding``,
    with the weight read from the state (the floating operand; the ids are integers)."""
    first, second = node.args[0], node.args[1]
    w, ids = (first, second) if first in st.leaf else (second, first)
    if w not in st.leaf or ids in st.leaf or len(st.shapes.get(st.leaf[w], ())) != 2:
        return st.unknown(node, "uses a computed embedding table")
    if st.layout(ids) is not None:
        st.freeze_segs(st.layout(ids).segs)
    wname = st.leaf[w]
    label = st.alias[wname].removesuffix(".weight")  # a tied table: its first name
    segs = st.open_group(wname, 1, st.shapes[wname][1], label)
    st.bind(wname, 0, None)
    out = st.shape(node)
    st.env[node] = Layout(len(out) - 1, segs) if segs and out else None
    st.producers.append(LayerRecord(wname, 1, node.name, len(out or ()) - 1, node.name))


# ---- norms -----------------------------------------------------------------------------------
def per_channel(
    st: TraceState, node: fx.Node, x: Any, names: Sequence[str], ok: bool = True, why: str = ""
) -> None:
    """A per-channel op on dim 1 whose state tensors ``names`` are indexed by channel; when
    not ``ok`` (it mixes channels in a way a permutation would break) it freezes them."""
    lay = st.layout(x)
    if lay is None or lay.dim != 1:
        for n in names:
            if n in st.alias:
                st.bind(n, 0, None)
        st.env[node] = lay  # statistics per channel are blind to other dims' order
        return
    if not ok:
        if st.live_groups(lay.segs):
            st.warn(node, why)
        st.freeze_segs(lay.segs)
        for n in names:
            st.fix(n)
        st.env[node] = None
        return
    for n in names:
        if n in st.alias:
            st.bind(n, 0, lay.segs)
    st.env[node] = lay


def channel_norm_module(st: TraceState, node: fx.Node) -> None:
    """BatchNorm / SyncBatchNorm / InstanceNorm: affine and running statistics per channel."""
    name = node.target
    names = [f"{name}.{p}" for p in ("weight", "bias", "running_mean", "running_var")]
    per_channel(st, node, st.first_arg(node), names)


def batch_norm_function(st: TraceState, node: fx.Node) -> None:
    """``F.batch_norm(x, running_mean, running_var, weight, bias, ...)`` with state tensors."""
    names = _leaves(st, node, (3, "weight"), (4, "bias"), (1, "running_mean"), (2, "running_var"))
    if names is None:
        return st.unknown(node, "normalises with computed statistics")
    per_channel(st, node, node.args[0], [n for n in names if n is not None])


def group_norm_module(st: TraceState, node: fx.Node) -> None:
    """``nn.GroupNorm``: with 1 group or one per channel the statistics do not depend on the
    order of channels; with 1 < G < C a permutation would move channels between groups."""
    mod = st.module(node)
    groups, channels = mod.num_groups, mod.num_channels
    per_channel(
        st,
        node,
        st.first_arg(node),
        [f"{node.target}.weight", f"{node.target}.bias"],
        groups in (1, channels),
        f"is GroupNorm with {groups} groups of "
        f"{channels // max(groups, 1)} channels (permutations would mix groups)",
    )


def layer_norm(st: TraceState, node: fx.Node, x: Any, k: int, names: Sequence[str]) -> None:
    """A norm over the last ``k`` dims whose affine tensors ``names`` have those ``k`` axes."""
    xs, lay = st.shape(x), st.layout(x)
    names = [n for n in names if n in st.alias]
    if lay is None or xs is None or lay.dim < len(xs) - k:
        for n in names:
            st.fix(n)
        st.env[node] = lay  # normalised dims do not include the units: order is free
        return
    axis = lay.dim - (len(xs) - k)
    for n in names:
        for a in range(k):
            st.bind(n, a, lay.segs if a == axis else None)
    st.env[node] = lay


def layer_norm_module(st: TraceState, node: fx.Node) -> None:
    """``nn.LayerNorm`` / ``nn.RMSNorm``."""
    k = len(st.module(node).normalized_shape)
    layer_norm(st, node, st.first_arg(node), k, [f"{node.target}.weight", f"{node.target}.bias"])


def layer_norm_function(st: TraceState, node: fx.Node) -> None:
    """``F.layer_norm(x, normalized_shape, weight, bias)`` with state tensors (or none)."""
    shape = st.arg(node, 1, "normalized_shape")
    k = 1 if isinstance(shape, int) else len(shape)
    names = _leaves(st, node, (2, "weight"), (3, "bias"))
    if names is None:
        return st.unknown(node, "normalises with a computed affine")
    layer_norm(st, node, node.args[0], k, [n for n in names if n is not None])


def rms_norm_function(st: TraceState, node: fx.Node) -> None:
    """``F.rms_norm(x, normalized_shape, weight, eps)`` with a state weight (or none)."""
    shape = st.arg(node, 1, "normalized_shape")
    k = 1 if isinstance(shape, int) else len(shape)
    names = _leaves(st, node, (2, "weight"))
    if names is None:
        return st.unknown(node, "normalises with a computed weight")
    layer_norm(st, node, node.args[0], k, [n for n in names if n is not None])


def prelu_module(st: TraceState, node: fx.Node) -> None:
    """``nn.PReLU``: one slope (order-free, fixed) or one per channel of dim 1."""
    mod = st.module(node)
    x, wname = st.first_arg(node), f"{node.target}.weight"
    if mod.num_parameters == 1:
        st.bind(wname, 0, None)
        st.env[node] = st.layout(x)
    else:
        per_channel(st, node, x, [wname])


def addmm(st: TraceState, node: fx.Node) -> None:
    """``torch.addmm(bias, x, W)`` with state tensors ``bias`` and ``W``: ``x @ W + bias``."""
    b, x, w = node.args[0], node.args[1], node.args[2]
    if w not in st.leaf or b not in st.leaf or node.kwargs or len(node.args) > 3:
        return st.unknown(node, "uses a computed weight")
    if not st.plain(x):
        return st.unknown(node)
    wname = st.leaf[w]
    label = wname.removesuffix(".weight")
    linear(st, node, x, wname, st.leaf[b], st.shapes[wname][1], label, in_axis=0, out_axis=1)
