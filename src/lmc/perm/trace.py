"""Derive a model's :class:`PermutationSpec` by tracing it with ``torch.fx``.

The model is traced with ``torch.fx.symbolic_trace`` and run once on an example input through
``ShapeProp`` so every intermediate value has a known shape. Walking the graph in order, each
tensor value gets a *layout*: which of its dimensions carries permutable units (its channel
dimension) and which permutation groups tile that dimension (``Segment`` records, as in the
spec). Groups live in a union-find:

- a Linear / Conv / Embedding output *opens* a group (its weight's output axis and bias);
- norms (BatchNorm, InstanceNorm, LayerNorm over the channel dim, GroupNorm(1, C) or (C, C)),
  elementwise activations, dropout, identity, pooling and softmax *carry* the layout, binding
  their per-channel parameters and running statistics to the group;
- reshapes (flatten, view, reshape, unflatten) carry it when channels stay whole, multiplying
  the segment's ``repeat`` when spatial positions are folded in (a Linear after
  ``Flatten`` of ``(C, H, W)`` reads index ``c * H * W + s``);
- an elementwise ``add``/``mul``/... of two permuted values *unites* their groups (a residual
  stream shares one permutation); ``cat`` along channels concatenates segments;
- reductions over the channel dimension give an unpermuted value (a sum does not care about
  order);
- the network's output freezes every group that reaches it; the input is never permuted.

Anything not understood (an unknown module, function or method that receives permuted
channels, a grouped conv, GroupNorm with 1 < G < C, ...) freezes the groups it touches, with a
``warnings.warn`` naming the node: frozen groups are left unpermuted, so a derived spec never
changes the function the model computes.
"""

from __future__ import annotations

import builtins
import math
import operator
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import fx, nn
from torch.fx.passes.shape_prop import ShapeProp, TensorMetadata

from lmc.config import LmcError

from .spec import PermutationSpec, Segment


class _Seg(NamedTuple):
    group: int | None
    size: int
    repeat: int

    @property
    def extent(self) -> int:
        return self.size * self.repeat


class _Layout(NamedTuple):
    dim: int  # the (non-negative) dimension of the value that carries units
    segs: tuple[_Seg, ...]


_UNBOUND = object()


class _UnionFind:
    def __init__(self) -> None:
        self.parent: list[int] = []
        self.size: list[int] = []
        self.frozen: list[bool] = []
        self.name: list[str] = []

    def new(self, size: int, name: str) -> int:
        self.parent.append(len(self.parent))
        self.size.append(size)
        self.frozen.append(False)
        self.name.append(name)
        return len(self.parent) - 1

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, i: int, j: int) -> None:
        ri, rj = self.find(i), self.find(j)
        if ri == rj:
            return
        lo, hi = min(ri, rj), max(ri, rj)  # the earliest group names the union
        self.parent[hi] = lo
        self.frozen[lo] = self.frozen[lo] or self.frozen[hi]

    def freeze(self, i: int) -> None:
        self.frozen[self.find(i)] = True

    def is_frozen(self, i: int) -> bool:
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


@dataclass
class TraceResult:
    """The derived spec plus what activation matching needs: where each weight reads/writes."""

    spec: PermutationSpec
    consumers: list[LayerRecord] = field(default_factory=list)
    producers: list[LayerRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# ---- the operations the tracer understands --------------------------------------------------

_ACTIVATION_MODULES = (
    nn.ReLU,
    nn.ReLU6,
    nn.GELU,
    nn.SiLU,
    nn.Tanh,
    nn.Sigmoid,
    nn.LeakyReLU,
    nn.ELU,
    nn.SELU,
    nn.CELU,
    nn.Softplus,
    nn.Mish,
    nn.Hardswish,
    nn.Hardsigmoid,
    nn.Hardtanh,
    nn.Softsign,
    nn.Tanhshrink,
    nn.LogSigmoid,
    nn.Threshold,
    nn.Softmax,
    nn.LogSoftmax,
    nn.Softmin,
    nn.Identity,
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
)
_SPATIAL_MODULES = (
    nn.MaxPool1d,
    nn.MaxPool2d,
    nn.MaxPool3d,
    nn.AvgPool1d,
    nn.AvgPool2d,
    nn.AvgPool3d,
    nn.AdaptiveAvgPool1d,
    nn.AdaptiveAvgPool2d,
    nn.AdaptiveAvgPool3d,
    nn.AdaptiveMaxPool1d,
    nn.AdaptiveMaxPool2d,
    nn.AdaptiveMaxPool3d,
    nn.LPPool1d,
    nn.LPPool2d,
    nn.Upsample,
    nn.ZeroPad2d,
    nn.ConstantPad1d,
    nn.ConstantPad2d,
    nn.ConstantPad3d,
    nn.ReflectionPad1d,
    nn.ReflectionPad2d,
    nn.ReplicationPad1d,
    nn.ReplicationPad2d,
    nn.ReplicationPad3d,
)
_CHANNEL_NORMS = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.SyncBatchNorm,
    nn.InstanceNorm1d,
    nn.InstanceNorm2d,
    nn.InstanceNorm3d,
)
_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_CONV_TRANSPOSES = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)

# Pointwise (or per-position equivariant, like softmax) functions and methods, by name: every
# tensor operand broadcasts against the others; scalars are ignored.
_POINTWISE = {
    "relu",
    "relu_",
    "relu6",
    "gelu",
    "silu",
    "elu",
    "elu_",
    "selu",
    "celu",
    "leaky_relu",
    "leaky_relu_",
    "hardtanh",
    "hardtanh_",
    "softplus",
    "mish",
    "hardswish",
    "hardsigmoid",
    "sigmoid",
    "sigmoid_",
    "tanh",
    "tanh_",
    "logsigmoid",
    "softsign",
    "tanhshrink",
    "dropout",
    "dropout1d",
    "dropout2d",
    "dropout3d",
    "alpha_dropout",
    "feature_alpha_dropout",
    "softmax",
    "log_softmax",
    "softmin",
    "normalize",
    "exp",
    "exp_",
    "abs",
    "abs_",
    "neg",
    "neg_",
    "pos",
    "sqrt",
    "rsqrt",
    "square",
    "sin",
    "cos",
    "log",
    "log1p",
    "expm1",
    "erf",
    "clamp",
    "clamp_",
    "clip",
    "clip_",
    "sign",
    "add",
    "add_",
    "iadd",
    "sub",
    "sub_",
    "isub",
    "mul",
    "mul_",
    "imul",
    "div",
    "div_",
    "truediv",
    "itruediv",
    "true_divide",
    "floordiv",
    "pow",
    "pow_",
    "maximum",
    "minimum",
    "where",
    "lerp",
    "addcmul",
    "addcdiv",
    "rsub",
    "reciprocal",
    "contiguous",
    "clone",
    "detach",
    "float",
    "double",
    "half",
    "bfloat16",
    "silu_",
    "requires_grad_",
}
_DATA_FIRST_ONLY = {"to", "type_as", "type"}  # other tensor operands give only dtype/device
_RESHAPES = {
    "flatten",
    "view",
    "reshape",
    "view_as",
    "reshape_as",
    "unflatten",
    "squeeze",
    "unsqueeze",
    "squeeze_",
    "unsqueeze_",
}
_EXPANDS = {"expand", "expand_as"}
_REDUCTIONS = {"mean", "sum", "amax", "amin", "logsumexp", "nansum", "nanmean", "prod"}
_METADATA = {
    "size",
    "dim",
    "numel",
    "nelement",
    "is_contiguous",
    "get_device",
    "ndimension",
    "len",
    "getattr",
}
_METADATA_ATTRS = {"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad"}
_SPATIAL_FUNCS = {
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "_max_pool1d",
    "_max_pool2d",
    "_max_pool3d",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "adaptive_max_pool1d",
    "adaptive_max_pool2d",
    "adaptive_max_pool3d",
    "_adaptive_max_pool1d",
    "_adaptive_max_pool2d",
    "_adaptive_max_pool3d",
    "lp_pool1d",
    "lp_pool2d",
    "interpolate",
    "upsample",
    "pad",
}
_FUNCTION_MODULES = ("torch", "_operator", "operator", "builtins", "math")


def _function_name(target: Any) -> str | None:
    """The name of a torch / operator function target, else ``None`` (unknown)."""
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", None)
    if name is None:
        return None
    if module.split(".")[0] in _FUNCTION_MODULES or module.startswith("torch"):
        return name
    if target in (operator.getitem, builtins.getattr, builtins.len):
        return name
    return None


def _is_full_slice(s: Any) -> bool:
    return isinstance(s, slice) and s.start is None and s.stop is None and s.step is None


class _Tracer:
    def __init__(self, model: nn.Module, example_inputs: tuple[Any, ...]) -> None:
        self.model = model
        try:
            self.gm = fx.symbolic_trace(model)
        except Exception as exc:  # noqa: BLE001 - fx raises many kinds of errors
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise LmcError(
                f"torch.fx could not trace {type(model).__name__} ({first}); write the "
                "permutation spec by hand with lmc.perm.PermutationSpec.from_dict"
            ) from exc
        modes = {m: m.training for m in model.modules()}
        try:
            model.eval()  # no running-statistics update, deterministic dropout
            with torch.no_grad():
                ShapeProp(self.gm).propagate(*example_inputs)
        except Exception as exc:  # noqa: BLE001
            raise LmcError(
                f"running {type(model).__name__} on the example input failed ({exc}); pass an "
                "input batch of the shape the model expects"
            ) from exc
        finally:
            for m, mode in modes.items():
                m.training = mode
        state = model.state_dict(keep_vars=True)
        self.shapes = {k: tuple(v.shape) for k, v in state.items() if v.is_floating_point()}
        canonical: dict[int, str] = {}
        self.alias: dict[str, str] = {}
        for k, v in state.items():
            if k in self.shapes:
                self.alias[k] = canonical.setdefault(id(v), k)
        self.bind_map: dict[str, list[Any]] = {
            k: [_UNBOUND] * len(s) for k, s in self.shapes.items() if self.alias[k] == k
        }
        self.uf = _UnionFind()
        self.env: dict[fx.Node, _Layout | None] = {}
        self.leaf: dict[fx.Node, str] = {}  # get_attr nodes of state tensors
        self.messages: list[str] = []
        self.consumers: list[LayerRecord] = []
        self.producers: list[LayerRecord] = []

    # ---- small helpers ------------------------------------------------------------------------
    def shape(self, node: Any) -> tuple[int, ...] | None:
        if not isinstance(node, fx.Node):
            return None
        meta = node.meta.get("tensor_meta")
        return tuple(meta.shape) if isinstance(meta, TensorMetadata) else None

    def layout(self, node: Any) -> _Layout | None:
        return self.env.get(node) if isinstance(node, fx.Node) else None

    def warn(self, node: fx.Node, why: str) -> None:
        self.messages.append(
            f"lmc.perm: node {node.name!r} ({node.op} {self._target_name(node)}) {why}; "
            "the permutation groups it touches are left unpermuted"
        )

    @staticmethod
    def _target_name(node: fx.Node) -> str:
        t = node.target
        return t if isinstance(t, str) else getattr(t, "__name__", repr(t))

    def freeze_segs(self, segs: Sequence[_Seg] | None) -> None:
        for s in segs or ():
            if s.group is not None:
                self.uf.freeze(s.group)

    def live_groups(self, segs: Sequence[_Seg] | None) -> bool:
        return any(s.group is not None and not self.uf.is_frozen(s.group) for s in segs or ())

    def unify(self, a: Sequence[_Seg], b: Sequence[_Seg]) -> bool:
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

    def bind(self, name: str | None, axis: int, segs: Sequence[_Seg] | None) -> None:
        """Record that axis ``axis`` of state tensor ``name`` is indexed by ``segs``."""
        if name is None or name not in self.alias:
            self.freeze_segs(segs)  # not a state tensor: it cannot follow a permutation
            return
        row = self.bind_map[self.alias[name]]
        segs = tuple(segs) if segs is not None else None
        cur = row[axis]
        if cur is _UNBOUND:
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

    def open_group(
        self, name: str | None, axis: int, size: int, label: str
    ) -> tuple[_Seg, ...] | None:
        """The output units of a weight layer: a new group, or the one its weight already has."""
        if name is None or name not in self.alias:
            return None
        cur = self.bind_map[self.alias[name]][axis]
        if cur is _UNBOUND:
            segs = (_Seg(self.uf.new(size, label), size, 1),)
            self.bind(name, axis, segs)
            return segs
        return cur  # a shared weight reuses its group (or None if it is fixed)

    def tensor_inputs(self, node: fx.Node) -> list[fx.Node]:
        out: list[fx.Node] = []
        fx.node.map_arg((node.args, node.kwargs), lambda n: out.append(n) if n not in out else None)
        return out

    def unknown(self, node: fx.Node, why: str = "is not understood") -> None:
        """Freeze everything permuted that flows into ``node``; its output is unpermuted."""
        touched = False
        for inp in self.tensor_inputs(node):
            lay = self.layout(inp)
            if lay is not None:
                touched = touched or self.live_groups(lay.segs)
                self.freeze_segs(lay.segs)
            if inp in self.leaf:
                self.fix(self.leaf[inp])
        if node.op == "call_module":
            prefix = f"{node.target}."
            for name in self.alias:
                if name.startswith(prefix):
                    self.fix(name)
        if touched:
            self.warn(node, why)
        self.env[node] = None

    # ---- the walk -----------------------------------------------------------------------------
    def run(self) -> None:
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                self.env[node] = None
            elif node.op == "get_attr":
                if node.target in self.alias:
                    self.leaf[node] = node.target
                self.env[node] = None
            elif node.op == "output":
                fx.node.map_arg(
                    node.args,
                    lambda n: self.freeze_segs(self.env[n].segs if self.env.get(n) else None),
                )
                for inp in self.tensor_inputs(node):
                    if inp in self.leaf:
                        self.fix(self.leaf[inp])
            elif node.op == "call_module":
                self.call_module(node)
            elif node.op == "call_function":
                self.call_function(node)
            elif node.op == "call_method":
                self.call_method(node)
            else:
                self.unknown(node)

    def call_module(self, node: fx.Node) -> None:
        mod = self.gm.get_submodule(node.target)
        x = node.args[0] if node.args else None
        name = node.target
        if isinstance(mod, nn.Linear):
            self.linear(
                node,
                x,
                f"{name}.weight",
                f"{name}.bias" if mod.bias is not None else None,
                mod.out_features,
                name,
            )
        elif isinstance(mod, _CONVS):
            self.conv(
                node,
                x,
                f"{name}.weight",
                f"{name}.bias" if mod.bias is not None else None,
                mod.out_channels,
                mod.groups,
                transposed=False,
                label=name,
            )
        elif isinstance(mod, _CONV_TRANSPOSES):
            self.conv(
                node,
                x,
                f"{name}.weight",
                f"{name}.bias" if mod.bias is not None else None,
                mod.out_channels,
                mod.groups,
                transposed=True,
                label=name,
            )
        elif isinstance(mod, _CHANNEL_NORMS):
            self.channel_norm(
                node, x, [f"{name}.{p}" for p in ("weight", "bias", "running_mean", "running_var")]
            )
        elif isinstance(mod, nn.GroupNorm):
            self.group_norm(
                node, x, mod.num_groups, mod.num_channels, [f"{name}.weight", f"{name}.bias"]
            )
        elif isinstance(mod, nn.LayerNorm) or type(mod).__name__ == "RMSNorm":
            shape = getattr(mod, "normalized_shape", ())
            self.layer_norm(node, x, len(shape), [f"{name}.weight", f"{name}.bias"])
        elif isinstance(mod, nn.PReLU):
            self.prelu(node, x, f"{name}.weight", mod.num_parameters)
        elif isinstance(mod, _ACTIVATION_MODULES):
            self.pointwise(node, [x])
        elif isinstance(mod, _SPATIAL_MODULES):
            if getattr(mod, "return_indices", False):
                self.unknown(node, "returns pooling indices")
            else:
                self.spatial(node, x)
        elif isinstance(mod, (nn.Flatten, nn.Unflatten)):
            self.reshape(node, x)
        elif isinstance(mod, nn.Embedding):
            segs = self.open_group(f"{name}.weight", 1, mod.embedding_dim, name)
            self.bind(f"{name}.weight", 0, None)
            out = self.shape(node)
            self.env[node] = _Layout(len(out) - 1, segs) if segs and out else None
            self.producers.append(LayerRecord(f"{name}.weight", 1, node.name, len(out or ()) - 1))
        else:
            self.unknown(node, f"is a module of unknown type {type(mod).__name__}")

    def call_function(self, node: fx.Node) -> None:
        fname = _function_name(node.target)
        args = node.args
        if fname is None:
            self.unknown(node)
        elif fname == "getitem":
            self.getitem(node, args[0], args[1])
        elif fname in ("getattr",):
            if len(args) > 1 and args[1] in _METADATA_ATTRS:
                self.env[node] = None
            else:
                self.unknown(node)
        elif fname in _METADATA:
            self.env[node] = None
        elif fname == "linear":
            w = self._arg(node, 1, "weight")
            b = self._arg(node, 2, "bias")
            if w not in self.leaf or (b is not None and b not in self.leaf):
                return self.unknown(node, "uses a computed weight")
            self.linear(
                node,
                args[0],
                self.leaf[w],
                self.leaf.get(b),
                self.shape(w)[0],
                self.leaf[w].removesuffix(".weight"),
            )
        elif fname in ("conv1d", "conv2d", "conv3d"):
            w = self._arg(node, 1, "weight")
            b = self._arg(node, 2, "bias")
            if w not in self.leaf or (b is not None and b not in self.leaf):
                return self.unknown(node, "uses a computed weight")
            groups = self._arg(node, 6, "groups", 1)
            self.conv(
                node,
                args[0],
                self.leaf[w],
                self.leaf.get(b),
                self.shape(w)[0],
                groups,
                transposed=False,
                label=self.leaf[w].removesuffix(".weight"),
            )
        elif fname in ("matmul", "mm"):
            self.matmul(node, args[0], args[1])
        elif fname == "layer_norm":
            shape = self._arg(node, 1, "normalized_shape")
            shape = (shape,) if isinstance(shape, int) else tuple(shape)
            self.layer_norm_leaves(
                node,
                args[0],
                len(shape),
                [self._arg(node, 2, "weight"), self._arg(node, 3, "bias")],
            )
        elif fname == "batch_norm":
            leaves = [
                self._arg(node, i, k)
                for i, k in ((3, "weight"), (4, "bias"), (1, "running_mean"), (2, "running_var"))
            ]
            self.channel_norm_leaves(node, args[0], leaves)
        elif fname in ("cat", "concat", "concatenate"):
            dim = self._arg(node, 1, "dim", None)
            if dim is None:
                dim = node.kwargs.get("axis", 0)
            self.cat(node, list(args[0]), dim)
        elif fname in ("flatten", "reshape", "unflatten", "squeeze", "unsqueeze"):
            self.reshape(node, args[0])
        elif fname in ("permute", "transpose", "swapaxes", "swapdims"):
            self.transpose(node, args[0], fname, args[1:])
        elif fname in _REDUCTIONS:
            self.reduce(node, args[0], self._arg(node, 1, "dim", None))
        elif fname in _SPATIAL_FUNCS:
            self.spatial(node, args[0])  # a tuple result (pooling indices) is refused there
        elif fname in _POINTWISE:
            self.pointwise(node, self.tensor_inputs(node))
        else:
            self.unknown(node)

    def call_method(self, node: fx.Node) -> None:
        name = node.target
        args = node.args
        x = args[0]
        if name in _METADATA:
            self.env[node] = None
        elif name in _DATA_FIRST_ONLY:
            self.pointwise(node, [x])
        elif name in _RESHAPES:
            self.reshape(node, x)
        elif name in _EXPANDS:
            self.expand(node, x)
        elif name in ("permute", "transpose", "swapaxes", "swapdims"):
            self.transpose(node, x, name, args[1:])
        elif name in _REDUCTIONS:
            self.reduce(node, x, self._arg(node, 1, "dim", None))
        elif name in _POINTWISE:
            self.pointwise(node, self.tensor_inputs(node))
        else:
            self.unknown(node)

    @staticmethod
    def _arg(node: fx.Node, index: int, key: str, default: Any = None) -> Any:
        if len(node.args) > index:
            return node.args[index]
        return node.kwargs.get(key, default)

    # ---- handlers -----------------------------------------------------------------------------
    def linear(self, node, x, wname, bname, out_features, label) -> None:
        xs, lay = self.shape(x), self.layout(x)
        in_segs = None
        if lay is not None:
            if xs is not None and lay.dim == len(xs) - 1:
                in_segs = lay.segs
            else:
                self.freeze_segs(lay.segs)  # units on a batch-like dim: one layout per value
        self.bind(wname, 1, in_segs)
        segs = self.open_group(wname, 0, out_features, label)
        if bname is not None:
            self.bind(bname, 0, segs)
        out = self.shape(node)
        self.env[node] = _Layout(len(out) - 1, segs) if segs and out else None
        if xs is not None:
            self.consumers.append(LayerRecord(wname, 1, x.name, len(xs) - 1))
        if out is not None:
            self.producers.append(LayerRecord(wname, 0, node.name, len(out) - 1))

    def matmul(self, node, x, w) -> None:
        ws = self.shape(w)
        if w not in self.leaf or ws is None or len(ws) != 2:
            return self.unknown(node, "multiplies two computed tensors")
        wname = self.leaf[w]
        xs, lay = self.shape(x), self.layout(x)
        in_segs = None
        if lay is not None:
            if xs is not None and lay.dim == len(xs) - 1:
                in_segs = lay.segs
            else:
                self.freeze_segs(lay.segs)
        self.bind(wname, 0, in_segs)
        segs = self.open_group(wname, 1, ws[1], wname)
        out = self.shape(node)
        self.env[node] = _Layout(len(out) - 1, segs) if segs and out else None
        if xs is not None:
            self.consumers.append(LayerRecord(wname, 0, x.name, len(xs) - 1))
        if out is not None:
            self.producers.append(LayerRecord(wname, 1, node.name, len(out) - 1))

    def conv(self, node, x, wname, bname, out_channels, groups, *, transposed, label) -> None:
        xs, lay = self.shape(x), self.layout(x)
        in_axis, out_axis = (0, 1) if transposed else (1, 0)
        in_segs = None
        if lay is not None:
            if lay.dim == 1:
                in_segs = lay.segs
            else:
                self.freeze_segs(lay.segs)
        out = self.shape(node)
        in_channels = xs[1] if xs else None
        if groups == 1:
            self.bind(wname, in_axis, in_segs)
            segs = self.open_group(wname, out_axis, out_channels, label)
        elif groups == in_channels == out_channels and not transposed:
            # depthwise: output channel c reads input channel c only, so they share units
            self.bind(wname, in_axis, None)
            self.bind(wname, out_axis, in_segs)
            segs = in_segs
        else:
            if in_segs is not None and self.live_groups(in_segs):
                self.warn(node, f"is a grouped convolution (groups={groups})")
            self.freeze_segs(in_segs)
            self.fix(wname)
            segs = None
        if bname is not None:
            self.bind(bname, 0, segs)
        self.env[node] = _Layout(1, segs) if segs and out else None
        if xs is not None:
            self.consumers.append(LayerRecord(wname, in_axis, x.name, 1))
        if out is not None:
            self.producers.append(LayerRecord(wname, out_axis, node.name, 1))

    def _per_channel(self, node, x, names, ok: bool, why: str) -> None:
        """Shared logic of norms whose parameters are indexed by channel dim 1."""
        lay = self.layout(x)
        if lay is None or lay.dim != 1:
            for n in names:
                if n in self.alias:
                    self.bind(n, 0, None)
            self.env[node] = lay  # statistics per channel are blind to other dims' order
            return
        if not ok:
            if self.live_groups(lay.segs):
                self.warn(node, why)
            self.freeze_segs(lay.segs)
            for n in names:
                self.fix(n)
            self.env[node] = None
            return
        for n in names:
            if n in self.alias:
                self.bind(n, 0, lay.segs)
        self.env[node] = lay

    def channel_norm(self, node, x, names) -> None:
        self._per_channel(node, x, names, True, "")

    def channel_norm_leaves(self, node, x, leaves) -> None:
        if any(v is not None and v not in self.leaf for v in leaves):
            return self.unknown(node, "normalises with computed statistics")
        self._per_channel(node, x, [self.leaf[v] for v in leaves if v is not None], True, "")

    def group_norm(self, node, x, groups, channels, names) -> None:
        ok = groups in (1, channels)
        self._per_channel(
            node,
            x,
            names,
            ok,
            f"is GroupNorm with {groups} groups of "
            f"{channels // max(groups, 1)} channels (permutations would mix groups)",
        )

    def layer_norm(self, node, x, k, names) -> None:
        xs, lay = self.shape(x), self.layout(x)
        names = [n for n in names if n in self.alias]
        if lay is None or xs is None or lay.dim < len(xs) - k:
            for n in names:
                self.fix(n)
            self.env[node] = lay  # normalised dims do not include the units: order is free
            return
        axis = lay.dim - (len(xs) - k)
        for n in names:
            for a in range(k):
                self.bind(n, a, lay.segs if a == axis else None)
        self.env[node] = lay

    def layer_norm_leaves(self, node, x, k, leaves) -> None:
        if any(v is not None and v not in self.leaf for v in leaves):
            return self.unknown(node, "normalises with a computed affine")
        self.layer_norm(node, x, k, [self.leaf[v] for v in leaves if v is not None])

    def prelu(self, node, x, wname, num_parameters) -> None:
        lay = self.layout(x)
        if num_parameters == 1:
            self.bind(wname, 0, None)
            self.env[node] = lay
        else:
            self._per_channel(node, x, [wname], True, "")

    def pointwise(self, node, operands: list[Any]) -> None:
        out = self.shape(node)
        operands = [o for o in operands if self.shape(o) is not None]
        if out is None:
            return self.unknown(node, "gives a non-tensor result")
        nd = len(out)
        permuted, plain = [], []
        for op in operands:
            lay = self.layout(op)
            if lay is not None:
                permuted.append((op, lay.dim + nd - len(self.shape(op)), lay.segs))
            else:
                plain.append(op)
        if not permuted:
            for op in plain:
                if op in self.leaf:
                    self.fix(self.leaf[op])
            self.env[node] = None
            return
        dims = {e for _, e, _ in permuted}
        segs = permuted[0][2]
        ok = len(dims) == 1 and all(self.unify(segs, s) for _, _, s in permuted[1:])
        e = permuted[0][1]
        if ok:
            for op in plain:
                shp = self.shape(op)
                k = e - (nd - len(shp))
                if k < 0 or shp[k] == 1:
                    if op in self.leaf:
                        self.fix(self.leaf[op])
                elif op in self.leaf:
                    name = self.leaf[op]
                    for a in range(len(shp)):
                        self.bind(name, a, segs if a == k else None)
                else:
                    if self.live_groups(segs):
                        self.warn(node, "combines permuted channels with a fixed tensor")
                    ok = False
        if not ok or out[e] != sum(s.extent for s in segs):
            for _, _, s in permuted:
                self.freeze_segs(s)
            for op in plain:
                if op in self.leaf:
                    self.fix(self.leaf[op])
            self.env[node] = None
            return
        self.env[node] = _Layout(e, segs)

    def spatial(self, node, x) -> None:
        xs, out, lay = self.shape(x), self.shape(node), self.layout(x)
        if lay is None:
            self.env[node] = None
        elif (
            out is not None
            and lay.dim == 1
            and len(xs) >= 3
            and len(out) == len(xs)
            and out[1] == xs[1]
        ):
            self.env[node] = lay
        else:
            self.unknown(node, "pools over the channel dimension")

    def expand(self, node, x) -> None:
        xs, out, lay = self.shape(x), self.shape(node), self.layout(x)
        if lay is None:
            self.env[node] = None
            return
        if out is None:
            return self.unknown(node)
        e = lay.dim + len(out) - len(xs)
        if out[e] == xs[lay.dim]:
            self.env[node] = _Layout(e, lay.segs)
        else:
            self.unknown(node)

    def reshape(self, node, x) -> None:
        lay = self.layout(x)
        if lay is None:
            self.env[node] = None
            return
        new = _reshape_layout(self.shape(x), self.shape(node), lay)
        if new is None:
            self.unknown(node, "reshapes the channel dimension into pieces")
        else:
            self.env[node] = new

    def transpose(self, node, x, name, dims) -> None:
        xs, lay = self.shape(x), self.layout(x)
        if lay is None:
            self.env[node] = None
            return
        nd = len(xs)
        if name == "permute":
            order = (
                list(dims[0])
                if len(dims) == 1 and isinstance(dims[0], (list, tuple))
                else list(dims)
            )
            if not all(isinstance(d, int) for d in order):
                return self.unknown(node)
            order = [d % nd for d in order]
            new_dim = order.index(lay.dim)
        else:
            if len(dims) != 2 or not all(isinstance(d, int) for d in dims):
                return self.unknown(node)
            a, b = dims[0] % nd, dims[1] % nd
            new_dim = b if lay.dim == a else a if lay.dim == b else lay.dim
        self.env[node] = _Layout(new_dim, lay.segs)

    def reduce(self, node, x, dim) -> None:
        xs, out, lay = self.shape(x), self.shape(node), self.layout(x)
        if out is None:
            return self.unknown(node, "gives a non-tensor result")
        if lay is None:
            self.env[node] = None
            return
        if dim is None:
            self.env[node] = None  # a full reduction ignores the order of units
            return
        dims = [dim] if isinstance(dim, int) else list(dim)
        if not all(isinstance(d, int) for d in dims):
            return self.unknown(node)
        dims = [d % len(xs) for d in dims]
        if lay.dim in dims:
            self.env[node] = None  # summing over units: order does not matter
            return
        new_dim = lay.dim - sum(d < lay.dim for d in dims) if len(out) < len(xs) else lay.dim
        if out[new_dim] != xs[lay.dim]:
            return self.unknown(node)
        self.env[node] = _Layout(new_dim, lay.segs)

    def cat(self, node, tensors, dim) -> None:
        out = self.shape(node)
        if out is None or not isinstance(dim, int) or any(self.shape(t) is None for t in tensors):
            return self.unknown(node)
        dim %= len(out)
        lays = [self.layout(t) for t in tensors]
        if all(lay is None for lay in lays):
            for t in tensors:
                if t in self.leaf:
                    self.fix(self.leaf[t])
            self.env[node] = None
            return
        if all(lay is None or lay.dim == dim for lay in lays):
            segs: list[_Seg] = []
            for t, lay in zip(tensors, lays):
                if lay is None:
                    if t in self.leaf:
                        self.fix(self.leaf[t])
                    segs.append(_Seg(None, self.shape(t)[dim], 1))
                else:
                    segs.extend(lay.segs)
            self.env[node] = _Layout(dim, tuple(segs))
            return
        # concatenation along another dim: all pieces must share the permuted units
        self.pointwise(node, tensors)

    def getitem(self, node, x, index) -> None:
        xs, lay = self.shape(x), self.layout(x)
        if xs is None or self.shape(node) is None:
            # indexing a tuple (from an op already handled) or a shape
            if lay is not None:
                return self.unknown(node)
            self.env[node] = None
            return
        if lay is None:
            self.env[node] = None
            return
        idx = index if isinstance(index, tuple) else (index,)
        if any(
            isinstance(i, fx.Node) or not isinstance(i, (int, slice, type(None), type(Ellipsis)))
            for i in idx
        ):
            return self.unknown(node, "indexes with a tensor")
        consumed = sum(1 for i in idx if i is not None and i is not Ellipsis)
        i_in, i_out, new_dim = 0, 0, None
        for item in idx:
            if item is None:
                i_out += 1
            elif item is Ellipsis:
                for _ in range(len(xs) - consumed):
                    if i_in == lay.dim:
                        new_dim = i_out
                    i_in += 1
                    i_out += 1
            elif isinstance(item, int):
                if i_in == lay.dim:
                    return self.unknown(node, "selects single channels")
                i_in += 1
            else:
                if i_in == lay.dim:
                    if not _is_full_slice(item):
                        return self.unknown(node, "slices the channel dimension")
                    new_dim = i_out
                i_in += 1
                i_out += 1
        if new_dim is None:
            new_dim = lay.dim - i_in + i_out
        self.env[node] = _Layout(new_dim, lay.segs)

    # ---- result -------------------------------------------------------------------------------
    def result(self) -> TraceResult:
        names: dict[int, str] = {}
        used: set[str] = set()

        def group_name(g: int) -> str | None:
            r = self.uf.find(g)
            if self.uf.frozen[r] or self.uf.size[r] < 2:
                return None
            if r not in names:
                base = self.uf.name[r]
                label, k = base, 2
                while label in used:
                    label, k = f"{base}#{k}", k + 1
                used.add(label)
                names[r] = label
            return names[r]

        axes: dict[str, list[Any]] = {}
        for name in self.shapes:
            row = self.bind_map[self.alias[name]]
            entries: list[Any] = []
            for segs in row:
                if segs is _UNBOUND or segs is None:
                    entries.append(None)
                else:
                    entries.append(
                        [
                            Segment(
                                group_name(s.group) if s.group is not None else None,
                                s.size,
                                s.repeat,
                            )
                            for s in segs
                        ]
                    )
            axes[name] = entries
        spec = PermutationSpec(axes, self.shapes)
        return TraceResult(spec, self.consumers, self.producers, list(self.messages))


def _reshape_layout(
    in_shape: tuple[int, ...] | None, out_shape: tuple[int, ...] | None, lay: _Layout
) -> _Layout | None:
    """Where a reshape moves the units of dim ``lay.dim``; ``None`` if it cuts a unit apart.

    With ``R_in`` the product of the input dims after the channel dim and ``R_out`` that of
    the output dims after the dim ``e`` that starts at the same flat offset, index
    ``(u * r + t) * R_in + rest`` lands at ``u * (r * R_in / R_out) + ...`` along ``e``: units
    stay whole iff ``R_out`` divides ``r * R_in`` for every segment (and its offset).
    """
    if in_shape is None or out_shape is None:
        return None
    d = lay.dim
    prefix = math.prod(in_shape[:d])
    r_in = math.prod(in_shape[d + 1 :])
    for e in range(len(out_shape)):
        if math.prod(out_shape[:e]) != prefix:
            continue
        if out_shape[e] == 1 and in_shape[d] != 1:
            continue
        r_out = math.prod(out_shape[e + 1 :])
        segs = []
        for s in lay.segs:
            if (s.repeat * r_in) % r_out:
                return None
            segs.append(_Seg(s.group, s.size, s.repeat * r_in // r_out))
        if sum(s.extent for s in segs) != out_shape[e]:
            return None
        return _Layout(e, tuple(segs))
    return None


def trace_model(model: nn.Module, example_input: Any) -> TraceResult:
    """Trace ``model`` on ``example_input`` (a tensor or a tuple of tensors); derive its spec.

    The model's train/eval flags and weights are left as they were (it runs once in eval
    mode under ``no_grad``). Warnings name the nodes that left groups unpermuted.
    """
    inputs = example_input if isinstance(example_input, tuple) else (example_input,)
    tracer = _Tracer(model, inputs)
    tracer.run()
    result = tracer.result()
    for message in result.warnings:
        warnings.warn(message, stacklevel=3)
    return result


def spec_from_model(model: nn.Module, example_input: Any) -> PermutationSpec:
    """The :class:`PermutationSpec` of ``model``, derived by tracing it with ``torch.fx``.

    ``example_input``: a small batch (two rows suffice) of what the model takes. Every
    floating parameter and buffer is in the spec; groups the tracer cannot prove safe are left
    unpermuted with a warning, so ``apply_permutation`` with any permutation of this spec
    leaves the model's function unchanged.
    """
    return trace_model(model, example_input).spec
