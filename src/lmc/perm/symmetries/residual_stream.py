"""The residual stream of a transformer, read off its traced graph (not its class).

The graph that yields the permutation spec (:mod:`lmc.perm.symmetries.trace`) also says where the
stream is and how it is used:

- *the stream* is the permutation group that the most residual additions join (an ``add``
  whose operands all carry it; the embeddings open it); none: no residual stream;
- *its norms* are modules whose part of the graph reads one value of the stream and returns one
  value carrying it, whose own parameters are vectors over its features, and that compute,
  checked numerically on the example input, ``(x − μ)/√(σ² + ε)·g + b`` (LayerNorm, with or
  without ``g`` and ``b``) or ``x/√(mean(x²) + ε)·g`` (RMSNorm, with or without ``g``) over the
  last dim, which parameter is ``g`` and which ``b`` found the same way — whatever the class
  (``nn.LayerNorm``, ``nn.RMSNorm``, Hugging Face's ``LlamaRMSNorm``, a user's own). The
  check runs on a float64 copy with every parameter redrawn (so a gain of ones or a centred
  stream at initialisation cannot hide which it is); ε is the module's (``eps``,
  ``variance_epsilon``, ``epsilon``), else estimated from its output on a scaled input;
- *its writers* are the tensors whose axis carries the stream as a layer's output (role
  ``out``: embedding features, output projections' rows and biases, class and position
  tokens); *its readers*, per norm, the weight layers that read that norm's output (through
  views, casts, dropout, token selection and pooling only).

Two things that scale the stream's features are folded, not refused: a *layer scale* (a
per-feature gain ``s`` on a branch's output before it is added, ``x + s ⊙ f(x)``: DINOv2's
``layer_scale1/2``, CaiT's ``gamma_1/2``), where the branch's output is a weight layer's, used by
nothing else (through views, casts and dropout only): ``s`` folds into that layer's output rows
and bias (:class:`LayerScale`); and a norm of an embedding lookup to which nothing is added
before it (Bloom's ``word_embeddings_layernorm``): ``norm(E[ids]) = norm(E)[ids]``, so the norm
folds into the table's rows (:class:`EmbeddingNorm`).

Every value carrying the stream is followed from the embeddings on. What lmc cannot fold is
refused with an ``LmcError`` naming the module or node and why: a norm's output added back into
the stream (post-LN, as BERT: the norm sits on the stream itself), a layer that reads the
stream without a norm, an op that an orthogonal map of the stream does not commute with (an
elementwise nonlinearity, a per-feature scale of the stream itself or of anything but a weight
layer's output, a reduction over the features), an elementwise parameter of
the stream that no norm owns, LayerNorms mixed with RMSNorms. The permutation spec is
unaffected: permutations keep working on such models.

The layout is a function of the architecture only, so it is cached by the model's structure
(module types and names, parameter names, shapes, dtypes and tying, simple attributes such as
ε, a Hugging Face config).
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx, nn

from lmc.config import LmcError

from .axis_roles import NORM_TYPES, derive_roles
from .example_inputs import example_input as make_example
from .example_inputs import unwrap
from .trace import TraceResult, trace_model
from .trace.names import function_name, op_name
from .trace.tables import (
    EXPANDS,
    METADATA,
    METADATA_ATTRS,
    PERMUTES,
    RESHAPES,
    TRANSPOSES,
)

NORM_KINDS = ("layer", "rms")
EPS_ATTRIBUTES = ("eps", "variance_epsilon", "epsilon", "layer_norm_eps", "norm_eps")
#: relative error below which a module is taken to compute a norm (it may compute in float32)
FIT_TOL = 1e-4


@dataclass(frozen=True)
class Reader:
    """A weight layer that reads a norm's output: its module name, the weight axis of its
    input features (1 for ``nn.Linear``'s ``(out, in)`` weight, 0 for Hugging Face's ``Conv1D``
    and ``x @ W``), the weight's state name (default ``<module>.weight``) and its bias's
    (``None``: none)."""

    module: str
    in_axis: int
    weight: str = ""
    bias: str | None = None

    def __post_init__(self) -> None:
        if not self.weight:
            object.__setattr__(self, "weight", f"{self.module}.weight")


@dataclass(frozen=True)
class NormSite:
    """One norm of the stream (module name), the layers that read its output, what it computes
    (``kind``: ``layer`` or ``rms``, its ``eps``) and the state names of its gain and bias
    (``None``: absent); ``gain_offset``: the number added to the gain tensor to give the gain
    the norm multiplies by (1 for Gemma's ``x̂ · (1 + w)``, else 0)."""

    norm: str
    readers: tuple[Reader, ...]
    kind: str = "layer"
    eps: float | None = 1e-5
    gain: str | None = None
    bias: str | None = None
    gain_offset: float = 0.0

    @property
    def parameter_free_rms(self) -> bool:
        return self.kind == "rms" and self.gain is None and self.bias is None


@dataclass(frozen=True)
class LayerScale:
    """A per-feature gain on a branch's output before it joins the stream (a *layer scale*:
    DINOv2's ``layer_scale1/2``, CaiT's and timm's ``ls1/ls2``): ``y = x + s ⊙ f(x)``. ``param``:
    the gain's state name (``width`` entries); ``writers``: ``(state name, feature axis)`` of the
    layer that writes the branch (its weight's output rows and its bias), which the canonical form
    scales by ``s``; ``module``: the module that only multiplies by ``s`` (replaced by the
    identity in the canonical form), ``""`` where ``s`` is an attribute of a larger module (it is
    then set to the number 1)."""

    param: str
    writers: tuple[tuple[str, int], ...]
    module: str = ""


@dataclass(frozen=True)
class EmbeddingNorm:
    """A norm applied to an embedding lookup before anything is added to it (Bloom's
    ``word_embeddings_layernorm``): ``norm(E[ids]) = norm(E)[ids]``, so the canonical form
    applies the norm to the rows of the table and replaces the module by the identity.
    ``norm``: its module; ``table``, ``axis``: the table's state name and feature axis; the rest
    as in :class:`NormSite`."""

    norm: str
    table: str
    axis: int
    kind: str = "layer"
    eps: float | None = 1e-5
    gain: str | None = None
    bias: str | None = None
    gain_offset: float = 0.0


@dataclass(frozen=True)
class StreamLayout:
    """Where a pre-norm transformer's residual stream is written and read.

    ``width``: its features; ``writers``: ``(state name, feature axis)`` of every tensor whose
    values are added into the stream; ``norms``: every norm on the stream with its readers, the
    final norm (read by the head) included; ``group``: the stream's group in the traced spec;
    ``tied``: the names of each tensor shared under several names among the writers and
    readers; ``heads``: the spec's nested groups (``group -> (head group, heads)``);
    ``scales``: the layer scales on branch outputs (folded into the writers they scale);
    ``embedding_norms``: the norms of embedding lookups (folded into their tables).
    """

    width: int
    writers: tuple[tuple[str, int], ...]
    norms: tuple[NormSite, ...]
    group: str = ""
    tied: tuple[tuple[str, ...], ...] = ()
    heads: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    scales: tuple[LayerScale, ...] = ()
    embedding_norms: tuple[EmbeddingNorm, ...] = ()

    @property
    def readers(self) -> tuple[Reader, ...]:
        return tuple(r for site in self.norms for r in site.readers)

    @property
    def centred(self) -> bool:
        """Whether some norm subtracts the mean (the canonical form then centres the writers)."""
        return any(site.kind == "layer" for site in self.norms)

    @property
    def canonical(self) -> bool:
        """Whether every norm is a parameter-free RMSNorm and nothing else scales the stream
        feature by feature (it then admits rotations)."""
        return (
            not self.scales
            and not self.embedding_norms
            and all(site.parameter_free_rms for site in self.norms)
        )

    def prefixed(self, prefix: str) -> StreamLayout:
        """The same layout with every name prefixed (a model inside a wrapper)."""
        if not prefix:
            return self

        def reader(r: Reader) -> Reader:
            bias = None if r.bias is None else prefix + r.bias
            return Reader(prefix + r.module, r.in_axis, prefix + r.weight, bias)

        def name(n: str | None) -> str | None:
            return None if n is None else prefix + n

        norms = tuple(
            NormSite(prefix + s.norm, tuple(map(reader, s.readers)), s.kind, s.eps,
                     name(s.gain), name(s.bias), s.gain_offset)
            for s in self.norms
        )  # fmt: skip
        scales = tuple(
            LayerScale(prefix + s.param, tuple((prefix + n, a) for n, a in s.writers),
                       prefix + s.module if s.module else "")
            for s in self.scales
        )  # fmt: skip
        embedding_norms = tuple(
            EmbeddingNorm(prefix + e.norm, prefix + e.table, e.axis, e.kind, e.eps,
                          name(e.gain), name(e.bias), e.gain_offset)
            for e in self.embedding_norms
        )  # fmt: skip
        return StreamLayout(
            self.width,
            tuple((prefix + n, a) for n, a in self.writers),
            norms,
            self.group,
            tuple(tuple(prefix + n for n in names) for names in self.tied),
            dict(self.heads),
            scales,
            embedding_norms,
        )


# ---- the graph ---------------------------------------------------------------------------------
_ADDS = frozenset({"add", "add_", "iadd", "sub", "sub_", "isub"})
_SCALES = frozenset({"mul", "mul_", "div", "div_", "truediv", "imul", "itruediv"})
_TRANSPARENT = (
    RESHAPES
    | EXPANDS
    | PERMUTES
    | TRANSPOSES
    | frozenset(
        {
            "t",
            "contiguous",
            "clone",
            "detach",
            "alias",
            "to",
            "type_as",
            "type",
            "_to_copy",
            "float",
            "double",
            "half",
            "bfloat16",
            "dropout",
            "native_dropout",
            "feature_dropout",
            "getitem",
            "slice",
            "select",
            "cat",
            "concat",
            "concatenate",
            "mean",
            "sum",
            "_unsafe_view",
            "lift_fresh_copy",
            "requires_grad_",
        }
    )  # fmt: skip
)
_CASTS = frozenset(
    {"to", "_to_copy", "alias", "contiguous", "clone", "detach", "type_as", "float", "double"}
)
_TRANSPARENT_MODULES: tuple[type[nn.Module], ...] = (
    nn.Identity, nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout,
    nn.FeatureAlphaDropout, nn.Flatten, nn.Unflatten,
)  # fmt: skip


def _op(gm: fx.GraphModule, node: fx.Node) -> str:
    """The op's name (function or method name, ``module:<Class>`` for a module call)."""
    if node.op == "call_module":
        mod = gm.get_submodule(node.target)
        if isinstance(mod, _TRANSPARENT_MODULES):
            return "dropout"
        return f"module:{type(mod).__name__}"
    if node.op == "call_function":
        return function_name(node.target) or getattr(node.target, "__name__", str(node.target))
    return str(node.target)


def _stack(node: fx.Node) -> list[str]:
    """The module paths enclosing ``node`` (outermost first)."""
    stack = node.meta.get("nn_module_stack") or {}
    out = []
    for value in stack.values():
        path = value[0] if isinstance(value, tuple) else value
        if isinstance(path, str):
            out.append(path)
    return out


def _shape(node: Any) -> tuple[int, ...] | None:
    meta = node.meta.get("tensor_meta") if isinstance(node, fx.Node) else None
    return tuple(meta.shape) if hasattr(meta, "shape") else None


class _Graph:
    """The walked graph with the stream group's carriers marked."""

    def __init__(self, trace: TraceResult, group: str) -> None:
        self.gm: fx.GraphModule = trace.graph
        self.group = group
        self.carries: dict[fx.Node, int | None] = {}  # node -> unit dim (None: not plain)
        for node in self.gm.graph.nodes:
            got = trace.node_groups.get(node.name)
            if got is not None and group in got[1]:
                self.carries[node] = got[0] if got[1] == (group,) else None

    def last(self, node: fx.Node) -> bool:
        """Whether ``node`` carries the stream, alone, on its last dim."""
        shape = _shape(node)
        dim = self.carries.get(node, -1)
        return shape is not None and dim is not None and dim == len(shape) - 1


def _no_stream(model: nn.Module, trace: TraceResult) -> str:
    """Why no residual stream was found: it is returned (a model without a head), or the
    tracer left it unpermuted (its first warning that freezes groups names where), or there is
    none."""
    name = type(model).__name__
    widths = set()
    for node in trace.graph.graph.nodes:
        if _op(trace.graph, node) in _ADDS:
            shapes = [_shape(a) for a in node.all_input_nodes]
            if len(shapes) == 2 and all(shapes) and shapes[0][-1] == shapes[1][-1] > 1:
                widths.add(shapes[0][-1])
    returned = [
        _shape(a) for node in trace.graph.graph.nodes if node.op == "output"
        for a in node.all_input_nodes
    ]  # fmt: skip
    if any(shape and shape[-1] in widths for shape in returned):
        return (
            f"{name} returns its residual stream's features (a model without a head: the caller "
            "sees them in their order), so no map of the stream keeps its outputs; align the "
            "model with its head (a ...ForCausalLM, ...ForSequenceClassification, ...)"
        )
    frozen = [w for w in trace.warnings if "left unpermuted" in w]
    if frozen:
        where = frozen[0].removeprefix("lmc.perm: ").split(";")[0]
        node = next((n for n in trace.graph.graph.nodes if f"node {n.name!r} " in where), None)
        stack = [p for p in _stack(node) if p] if node is not None else []
        module = f" (in module {stack[-1]!r})" if stack else ""
        return (
            f"{name}'s residual stream cannot be followed: the permutation tracer leaves it "
            f"unpermuted at {where}{module}"
        )
    return (
        f"{name} is not a supported pre-LayerNorm transformer: no residual stream (no addition "
        "joins two values of one permutation group in its traced graph)"
    )


def _stream_group(trace: TraceResult) -> str | None:
    """The group the most residual additions join (module docstring)."""
    counts: dict[str, int] = {}
    for node in trace.graph.graph.nodes:
        if op_name(node) not in _ADDS:
            continue
        groups = []  # a stream's features are its values' last dim (not heads, not RoPE halves)
        for a in node.all_input_nodes:
            got, shape = trace.node_groups.get(a.name), _shape(a)
            if got is not None and len(got[1]) == 1 and shape and got[0] == len(shape) - 1:
                groups.append(got[1])
        if len(groups) >= 2 and all(g == groups[0] for g in groups):
            counts[groups[0][0]] = counts.get(groups[0][0], 0) + 1
    if not counts:
        return None
    return max(counts, key=lambda g: (counts[g], trace.spec.group_sizes.get(g, 0)))


# ---- norms recognised by what they compute ------------------------------------------------------
def _regions(gm: fx.GraphModule) -> dict[str, list[fx.Node]]:
    """Module path -> the graph's nodes inside it (in order)."""
    out: dict[str, list[fx.Node]] = {}
    for node in gm.graph.nodes:
        for path in _stack(node):
            if path:
                out.setdefault(path, []).append(node)
    return out


def _candidates(
    model: nn.Module, graph: _Graph, width: int
) -> dict[str, tuple[fx.Node, fx.Node, set[fx.Node]]]:
    """Module path -> (input, output, nodes) of every module whose part of the graph reads one
    value carrying the stream and returns one, with only feature vectors as parameters."""
    out = {}
    for path, nodes in _regions(graph.gm).items():
        try:
            module = model.get_submodule(path)
        except AttributeError:
            continue
        params = list(module.parameters())
        if any(p.dim() != 1 or p.shape[0] != width for p in params):
            continue
        inside = set(nodes)
        inputs = {
            a for n in nodes for a in n.all_input_nodes if a not in inside and a.op != "get_attr"
        }
        if len(inputs) != 1:
            continue
        (x,) = inputs
        copies = {x}  # the input under a cast (an exported graph may reuse one outside)
        for n in nodes:
            if n.all_input_nodes and set(n.all_input_nodes) <= copies:
                if _op(graph.gm, n) in _CASTS:
                    copies.add(n)
        outputs = [n for n in nodes if n not in copies and any(u not in inside for u in n.users)]
        if len(outputs) != 1:
            continue
        if graph.last(x) and graph.last(outputs[0]):
            out[path] = (x, outputs[0], inside)
    return out


def _eps_attribute(module: nn.Module) -> tuple[bool, float | None]:
    for name in EPS_ATTRIBUTES:
        if hasattr(module, name):
            value = getattr(module, name)
            if value is None or isinstance(value, (int, float)):
                return True, None if value is None else float(value)
    return False, None


def _normalise(x: torch.Tensor, kind: str, eps: float) -> torch.Tensor:
    c = x - x.mean(-1, keepdim=True) if kind == "layer" else x
    return c / torch.sqrt(c.pow(2).mean(-1, keepdim=True) + eps)


def _estimate_eps(module: nn.Module, x: torch.Tensor, kind: str, g, b) -> float | None:
    """ε from the module's output on ``x`` scaled down to a mean square of 1e-6."""
    c = x - x.mean(-1, keepdim=True) if kind == "layer" else x
    scale = math.sqrt(1e-6 / max(float(c.pow(2).mean()), 1e-300))
    with torch.no_grad():
        y = module(x * scale)
    n = (y - (0 if b is None else b)) / (1 if g is None else g)
    cs = c * scale
    s = (cs * n).sum(-1) / n.pow(2).sum(-1).clamp_min(1e-300)
    eps = (s.pow(2) - cs.pow(2).mean(-1)).median()
    return float(eps) if torch.isfinite(eps) and float(eps) >= 0 else None


def _fit_norm(
    path: str, module: nn.Module, x: torch.Tensor, y: torch.Tensor
) -> tuple[str, float | None, str | None, str | None, float] | None:
    """``(kind, eps, gain, bias, gain_offset)`` (parameter names within the module) of the norm
    ``module`` computes from ``x`` to ``y`` (float64), or ``None`` when it is no LayerNorm or
    RMSNorm over the last dim with its own parameters as gain (itself, or 1 + itself) and
    bias."""
    if not isinstance(y, torch.Tensor) or y.shape != x.shape or torch.equal(x, y):
        return None
    params = dict(module.named_parameters())
    known, eps_attr = _eps_attribute(module)
    scale = float(y.abs().max()) or 1.0
    options = [None, *params]
    shapes = [
        (kind, gain, bias, offset)
        for kind in ("rms", "layer")
        for gain in options
        for bias in options
        for offset in ((0.0,) if gain is None else (0.0, 1.0))
        if bias is None or bias != gain
    ]
    for kind, gain, bias, offset in shapes:
        g = None if gain is None else params[gain].detach() + offset
        b = None if bias is None else params[bias].detach()
        if known:
            eps = eps_attr if eps_attr is not None else torch.finfo(x.dtype).eps
        else:
            eps = _estimate_eps(module, x, kind, g, b)
            if eps is None:
                continue
        pred = _normalise(x, kind, eps)
        pred = pred * (1 if g is None else g) + (0 if b is None else b)
        if float((pred - y).abs().max()) <= FIT_TOL * scale:
            return kind, (eps_attr if known else eps), gain, bias, offset
    return None


def _randomised(model: nn.Module) -> nn.Module:
    """A float64 copy with every parameter redrawn (seeded): matrices ~ N(0, 1/fan_in),
    vectors 1 + N(0, 0.3²) (so gains are far from 1 and biases far from 0)."""
    out = copy.deepcopy(model).double().eval()
    gen = torch.Generator().manual_seed(12345)
    with torch.no_grad():
        for p in out.parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.device)
            if p.dim() >= 2:
                p.copy_(noise / math.sqrt(p[0].numel()))
            else:
                p.copy_(1 + 0.3 * noise)
    return out


def _as_double(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.double()
    if isinstance(x, tuple):
        return tuple(_as_double(t) for t in x)
    return x


def _recognise_norms(
    model: nn.Module, example: Any, candidates: Mapping[str, Any]
) -> dict[str, tuple[str, float | None, str | None, str | None]]:
    """The candidates that compute a norm (see :func:`_fit_norm`), innermost first."""
    if not candidates:
        return {}
    copy_ = _randomised(model)
    seen: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    hooks = []
    for path in candidates:

        def hook(_m, args, output, path=path):
            if args and isinstance(args[0], torch.Tensor) and isinstance(output, torch.Tensor):
                seen.setdefault(path, (args[0].detach(), output.detach()))

        hooks.append(copy_.get_submodule(path).register_forward_hook(hook))
    inputs = example if isinstance(example, tuple) else (example,)
    try:
        with torch.no_grad():
            copy_(*_as_double(inputs))
    finally:
        for h in hooks:
            h.remove()
    found: dict[str, Any] = {}
    for path in sorted(candidates, key=lambda p: -len(p.split("."))):
        if any(other.startswith(path + ".") for other in found) or path not in seen:
            continue
        x, y = seen[path]
        module = copy_.get_submodule(path)
        fit = _fit_norm(path, module, x, y)
        if fit is not None:
            found[path] = fit
        elif isinstance(model.get_submodule(path), NORM_TYPES):
            raise LmcError(
                f"canonical form: {path!r} is a {type(module).__name__}, not a LayerNorm or "
                "RMSNorm over the features; only transformers whose stream is read through "
                "LayerNorms or RMSNorms can be canonicalised"
            )
    return found


# ---- following the stream -----------------------------------------------------------------------
def _refuse(what: str) -> LmcError:
    return LmcError(f"canonical form: {what}; permutations still work (--align weight)")


def _follow(
    model: nn.Module,
    trace: TraceResult,
    graph: _Graph,
    norms: Mapping[str, tuple[fx.Node, fx.Node, set[fx.Node]]],
    folded: frozenset[str] = frozenset(),
) -> tuple[dict[str, list[Any]], list[tuple[str, fx.Node, fx.Node]]]:
    """Norm path -> the consumer records of the layers reading its output, and the layer scales
    (``(gain's state name, the layer output it scales, the scaling node)``); ``LmcError`` for
    a use of the stream lmc cannot fold (module docstring). ``folded``: the norms of embedding
    lookups, whose outputs are the stream itself."""
    region_of: dict[fx.Node, str] = {}
    for path, (_, _, inside) in norms.items():
        for n in inside:
            region_of[n] = path
    outputs = {out: path for path, (_, out, _) in norms.items()}
    producers = {rec.layer for rec in trace.producers if rec.layer}
    consumers: dict[tuple[str, str], list[Any]] = {}
    for rec in trace.consumers:
        consumers.setdefault((rec.layer, rec.node), []).append(rec)
    made = {rec.node for rec in trace.producers if rec.node}
    state = model.state_dict(keep_vars=True)
    scales: list[tuple[str, fx.Node, fx.Node]] = []
    tag: dict[fx.Node, str] = {}  # "stream" or the norm path whose output it is
    readers: dict[str, list[Any]] = {path: [] for path in norms}
    gm = graph.gm
    for node in gm.graph.nodes:
        if node in region_of:
            if node in outputs:
                tag[node] = "stream" if outputs[node] in folded else outputs[node]
            continue
        if node not in graph.carries:
            continue
        op = _op(gm, node)
        carried = [a for a in node.all_input_nodes if a in graph.carries]
        tags = [tag.get(a, "stream") for a in carried]
        normed = [t for t in tags if t != "stream"]
        if node.name in producers or op == "module:MultiheadAttention":
            tag[node] = "stream"
        elif op in _ADDS and len(carried) >= 1:
            if normed:
                path = normed[0]
                if _after_addition(gm, norms[path][0]):
                    raise _refuse(
                        f"{path!r} normalises the residual stream in place (its output is "
                        "added back into the stream: post-LN), which lmc cannot fold"
                    )
                raise _refuse(
                    f"{path!r} normalises a layer's output on its way into the residual stream "
                    "(a norm after the embedding or after an attention / MLP output), which an "
                    "orthogonal map of the stream does not commute with"
                )
            others = [a for a in node.all_input_nodes if a not in graph.carries]
            if not all(_from_leaves(gm, a) for a in others):
                raise _refuse(f"{_where(gm, node)} adds a computed tensor to the residual stream")
            tag[node] = "stream"
        elif (
            op in _TRANSPARENT
            or op == "dropout"
            or (op in _SCALES and _scales_every_feature_alike(graph, node))
            or (op == "getattr" and len(node.args) > 1 and node.args[1] in METADATA_ATTRS)
        ):
            if len(set(tags)) > 1:
                raise _refuse(f"{_where(gm, node)} mixes a norm's output with the stream")
            tag[node] = tags[0] if tags else "stream"
        elif op in _SCALES and (
            found := _layer_scale(graph, node, made, state, trace.spec.group_sizes[graph.group])
        ):
            if tags != ["stream"]:
                raise _refuse(f"{_where(gm, node)} scales a norm's output feature by feature")
            scales.append((found[0], found[1], node))
            tag[node] = "stream"
        elif op in _SCALES:
            raise _refuse(
                f"{_where(gm, node)} scales the residual stream feature by feature (a layer "
                "scale or gate that lmc does not fold), which an orthogonal map of the stream "
                "does not commute with"
            )
        else:
            raise _refuse(
                f"the residual stream passes through {_where(gm, node)}, which an "
                "orthogonal map of the stream does not commute with"
            )
    # every use of a value carrying the stream, outside the norms, must be one of the above, a
    # norm's input, or a weight layer reading a norm's output
    for node in list(graph.carries):
        if node in region_of and node not in outputs:
            continue
        for user in node.users:
            recs = consumers.get((user.name, node.name))
            if recs:
                source = tag.get(node, "stream")
                if source == "stream":
                    raise _refuse(
                        f"{recs[0].weight!r} reads the residual stream without a norm, which "
                        "lmc cannot fold"
                    )
                readers[source].extend((rec, user) for rec in recs)
                continue
            if user in graph.carries or user.op == "output":
                continue
            if user in region_of:
                path = region_of[user]
                if norms[path][0] is not node:
                    raise _refuse(f"{path!r} reads the stream in a way not understood")
                if tag.get(node, "stream") != "stream":
                    raise _refuse(f"{path!r} normalises the output of the norm {tag[node]!r} again")
                continue
            op = _op(gm, user)
            if op in METADATA or op == "getattr":
                continue
            raise _refuse(
                f"{_where(gm, user)} uses the residual stream in a way an orthogonal map "
                "of the stream does not keep"
            )
    return readers, scales


def _leaf(gm: fx.GraphModule, node: fx.Node) -> fx.Node | None:
    """The ``get_attr`` node that ``node`` is (a view or cast of), else ``None``."""
    while node.op != "get_attr":
        if _op(gm, node) not in _TRANSPARENT or len(node.all_input_nodes) != 1:
            return None
        node = node.all_input_nodes[0]
    return node


def _layer_scale(
    graph: _Graph, node: fx.Node, made: set[str], state: Mapping[str, Any], width: int
) -> tuple[str, fx.Node] | None:
    """``(gain's state name, layer output)`` where ``node`` multiplies a weight layer's output
    -- used by nothing else, through views, casts and dropout only -- by a state tensor of one
    number per feature (a layer scale), else ``None``."""
    gm = graph.gm
    if _op(gm, node) not in {"mul", "mul_", "imul"}:
        return None
    carried = [a for a in node.all_input_nodes if a in graph.carries]
    others = [a for a in node.all_input_nodes if a not in graph.carries]
    if len(carried) != 1 or len(others) != 1 or not graph.last(carried[0]):
        return None
    leaf = _leaf(gm, others[0])
    tensor = state.get(leaf.target) if leaf is not None else None
    if not isinstance(tensor, torch.Tensor) or tensor.numel() != width:
        return None
    if tensor.dim() == 0 or tensor.shape[-1] != width:
        return None
    source = carried[0]
    while True:
        if len(source.users) != 1:
            return None
        if source.name in made:
            return str(leaf.target), source
        if _op(gm, source) not in _TRANSPARENT or len(source.all_input_nodes) != 1:
            return None
        source = source.all_input_nodes[0]


def _where(gm: fx.GraphModule, node: fx.Node) -> str:
    """``node 'mul_5' (mul) in module 'model.layers.0.mlp'`` (the innermost module calling it)."""
    stack = [p for p in _stack(node) if p]
    where = f" in module {stack[-1]!r}" if stack else ""
    return f"node {node.name!r} ({_op(gm, node)}){where}"


def _scales_every_feature_alike(graph: _Graph, node: fx.Node) -> bool:
    """Whether ``node`` multiplies (or divides) one value of the stream by numbers that are the
    same for every feature (a Python number, or tensors whose last dim is 1: Gemma's scaled
    embeddings, a per-token weight), which commutes with any map of the features."""
    carried = [a for a in node.all_input_nodes if a in graph.carries]
    if len(carried) != 1:
        return False
    if _op(graph.gm, node) in {"div", "div_", "truediv", "itruediv"} and (
        node.args[0] is not carried[0]
    ):
        return False  # a number divided by the stream
    for other in node.all_input_nodes:
        if other is carried[0]:
            continue
        shape = _shape(other)
        if shape is None or (len(shape) > 0 and shape[-1] != 1):
            return False
    return True


def _after_addition(gm: fx.GraphModule, node: fx.Node) -> bool:
    """Whether ``node`` is (a view or cast of) a sum: a norm reading it normalises the stream
    itself (post-LN), not a layer's output on its way into the stream."""
    while _op(gm, node) in _TRANSPARENT and len(node.all_input_nodes) == 1:
        node = node.all_input_nodes[0]
    return _op(gm, node) in _ADDS


def _from_leaves(gm: fx.GraphModule, node: fx.Node) -> bool:
    """Whether ``node`` is a state tensor or a view of one (``self.pos[:, :T]``)."""
    if node.op == "get_attr":
        return True
    if _op(gm, node) not in _TRANSPARENT or not node.all_input_nodes:
        return False
    return all(_from_leaves(gm, a) for a in node.all_input_nodes)


def _reader(model: nn.Module, rec: Any, layer: fx.Node) -> Reader:
    """The reader of a consumer record; under the name of the module that calls it where a
    tied weight appears in the graph under another of its names (an exported graph)."""
    weight = rec.weight
    stack = _stack(layer)
    state = model.state_dict(keep_vars=True)
    if stack and state.get(f"{stack[-1]}.weight") is state.get(weight):
        weight = f"{stack[-1]}.weight"
    rec = type(rec)(weight, rec.axis, rec.node, rec.dim, rec.layer, rec.bias)
    module = rec.weight.rpartition(".")[0]
    bias = rec.bias
    if bias is None:
        owner = model.get_submodule(module) if module else model
        if isinstance(getattr(owner, "bias", None), torch.Tensor) and rec.weight.endswith(
            ".weight"
        ):
            bias = f"{module}.bias"
    return Reader(module, rec.axis, rec.weight, bias)


def _tied(model: nn.Module, names: set[str]) -> tuple[tuple[str, ...], ...]:
    groups: dict[int, list[str]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        groups.setdefault(id(tensor), []).append(name)
    return tuple(tuple(g) for g in groups.values() if len(g) > 1 and any(n in names for n in g))


def layout_from_trace(model: nn.Module, trace: TraceResult, example: Any) -> StreamLayout:
    """The :class:`StreamLayout` of ``model`` from its trace on ``example`` (module docstring);
    ``LmcError`` where the stream cannot be folded."""
    spec = trace.spec
    group = _stream_group(trace)
    if group is None:
        raise LmcError(f"canonical form: {_no_stream(model, trace)}")
    width = spec.group_sizes[group]
    graph = _Graph(trace, group)
    candidates = _candidates(model, graph, width)
    fits = _recognise_norms(model, example, candidates)
    norms = {path: candidates[path] for path in fits}
    lookups = {path: t for path in fits if (t := _lookup_table(graph, trace, norms[path][0]))}
    kinds = {fits[p][0] for p in fits if p not in lookups}
    if len(kinds) > 1:
        layer = next(p for p in fits if fits[p][0] == "layer" and p not in lookups)
        rms = next(p for p in fits if fits[p][0] == "rms" and p not in lookups)
        raise _refuse(
            f"the stream is read by a LayerNorm ({layer!r}) and an RMSNorm ({rms!r}); centring "
            "the stream for the one would change the other"
        )
    readers, scaled = _follow(model, trace, graph, norms, frozenset(lookups))
    roles = derive_roles(model, spec, trace)
    owned = {f"{path}.{p}" for path, fit in fits.items() for p in fit[2:4] if p is not None}
    owned |= {param for param, _, _ in scaled}
    writers: list[tuple[str, int]] = []
    reader_names = {rec.weight for recs in readers.values() for rec, _ in recs}
    for name, axis in spec.groups.get(group, []):
        entry = spec[name][axis]
        role = roles[(name, axis)]
        if name in owned or _tied_to(model, name, owned):
            continue
        if any(seg.perm == group and r == "norm" for seg, r in zip(entry, role)):
            raise _refuse(
                f"{name!r} scales the stream feature by feature but no norm lmc recognises owns it"
            )
        if "out" in role:
            if len(entry) != 1:
                raise _refuse(f"{name!r} writes the stream together with other units")
            writers.append((name, axis))
        elif name not in reader_names and not _tied_to(model, name, reader_names):
            raise _refuse(f"{name!r} reads the stream other than through a norm")
    scales = tuple(_scale_record(model, trace, writers, *found) for found in scaled)
    embedding_norms = []
    for path, table in lookups.items():
        kind, eps, gain, bias, offset = fits[path]
        name, axis = _writer_named(model, writers, table.weight, table.axis, path)
        embedding_norms.append(
            EmbeddingNorm(path, name, axis, kind, eps,
                          None if gain is None else f"{path}.{gain}",
                          None if bias is None else f"{path}.{bias}", offset)
        )  # fmt: skip
    sites = []
    for path, (kind, eps, gain, bias, offset) in fits.items():
        if path in lookups:
            continue
        seen: dict[str, Reader] = {}
        for rec, layer in readers[path]:
            reader = _reader(model, rec, layer)
            entry = spec[rec.weight][rec.axis] if rec.weight in spec else None
            if spec.shapes[rec.weight][rec.axis] != width and (
                entry is None or any(seg != (group, width, 1) for seg in entry)
            ):
                raise _refuse(
                    f"{reader.weight!r} reads the output of {path!r} together with other features"
                )
            seen.setdefault(reader.weight, reader)
        sites.append(
            NormSite(
                path, tuple(seen.values()), kind, eps,
                None if gain is None else f"{path}.{gain}",
                None if bias is None else f"{path}.{bias}", offset,
            )
        )  # fmt: skip
    first = {path: _first_index(graph.gm, norms[path][2]) for path in fits}
    sites.sort(key=lambda s: first[s.norm])
    names = {n for n, _ in writers} | {r.weight for s in sites for r in s.readers}
    return StreamLayout(
        width, tuple(writers), tuple(sites), group, _tied(model, names), dict(spec.heads),
        scales, tuple(embedding_norms),
    )  # fmt: skip


def _lookup_table(graph: _Graph, trace: TraceResult, x: fx.Node) -> Any:
    """The producer record of the embedding lookup that ``x`` (a norm's input) is -- through
    casts and dropout, used by nothing else -- else ``None``: the norm is then applied to a
    lookup before anything is added to it (a norm of the table's rows)."""
    gm = graph.gm
    node = x
    while True:
        if len(node.users) != 1:
            return None
        recs = [r for r in trace.producers if r.node == node.name]
        if recs:
            layer = next((n for n in gm.graph.nodes if n.name == recs[0].layer), None)
            if len(recs) != 1 or layer is None or "embedding" not in _op(gm, layer).lower():
                return None
            return recs[0]
        if _op(gm, node) not in _CASTS | {"dropout", "native_dropout"}:
            return None
        if len(node.all_input_nodes) != 1:
            return None
        node = node.all_input_nodes[0]


def _writer_named(
    model: nn.Module, writers: list[tuple[str, int]], name: str, axis: int, why: str
) -> tuple[str, int]:
    """The writer that is the tensor ``name`` (under any of its tied names), with ``axis``;
    ``LmcError`` where it is no writer or is tied to another writer."""
    state = model.state_dict(keep_vars=True)
    tensor = state.get(name)
    hits = [(n, a) for n, a in writers if state.get(n) is tensor and a == axis]
    if len(hits) != 1:
        raise _refuse(f"{why!r} scales {name!r}, which lmc does not find once among the writers")
    return hits[0]


def _scale_record(
    model: nn.Module,
    trace: TraceResult,
    writers: list[tuple[str, int]],
    param: str,
    source: fx.Node,
    node: fx.Node,
) -> LayerScale:
    """The :class:`LayerScale` of the gain ``param`` multiplying ``source`` at ``node``: the
    writers of the layer producing ``source``, and the module to drop (one that only
    multiplies by ``param``)."""
    gm = trace.graph
    state = model.state_dict(keep_vars=True)
    targets: list[tuple[str, int]] = []
    for rec in trace.producers:
        if rec.node != source.name:
            continue
        targets.append(_writer_named(model, writers, rec.weight, rec.axis, param))
        if rec.bias is not None:
            targets.append(_writer_named(model, writers, rec.bias, 0, param))
    tensors = {id(state[n]) for n, _ in targets}
    for name, tensor in state.items():
        if id(tensor) in tensors and name not in {n for n, _ in targets}:
            raise _refuse(f"{param!r} scales {name!r}, a tensor tied to another")
    if not targets:
        raise _refuse(f"{param!r} scales a layer whose weights lmc does not find")
    module = param.rpartition(".")[0]
    owner = model.get_submodule(module) if module else model
    alone = (
        bool(module)
        and [n for n, _ in owner.named_parameters()] == [param.rpartition(".")[2]]
        and not list(owner.buffers())
        and {n for n in _regions(gm).get(module, []) if n.op == "call_function"} <= {node}
    )
    return LayerScale(param, tuple(targets), module if alone else "")


def _first_index(gm: fx.GraphModule, nodes: set[fx.Node]) -> int:
    return min(i for i, n in enumerate(gm.graph.nodes) if n in nodes)


def _tied_to(model: nn.Module, name: str, names: set[str]) -> bool:
    state = model.state_dict(keep_vars=True)
    tensor = state.get(name)
    return any(state.get(other) is tensor for other in names if other != name)


# ---- cached entry point -------------------------------------------------------------------------
_CACHE: dict[Any, StreamLayout | LmcError] = {}
_CACHE_SIZE = 64


def _simple(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def structure_key(model: nn.Module, example: Any) -> Any:
    """What the layout depends on: module names, types and simple attributes, state names,
    shapes, dtypes and tying, a Hugging Face config, and the example's shape."""
    modules = []
    for name, module in model.named_modules():
        attrs = tuple(
            sorted((k, v) for k, v in vars(module).items() if not k.startswith("_") and _simple(v))
        )
        config = getattr(module, "config", None)
        config_text = ""
        if config is not None and hasattr(config, "to_json_string"):
            try:
                config_text = config.to_json_string()
            except Exception:  # noqa: BLE001 - any config that does not serialise
                config_text = repr(type(config))
        modules.append((name, type(module).__qualname__, type(module).__module__, attrs,
                        config_text))  # fmt: skip
    ids: dict[int, int] = {}
    state = tuple(
        (k, tuple(v.shape), str(v.dtype), ids.setdefault(id(v), len(ids)))
        for k, v in model.state_dict(keep_vars=True).items()
    )
    inputs = example if isinstance(example, tuple) else (example,)
    shapes = tuple(
        (tuple(t.shape), str(t.dtype)) if isinstance(t, torch.Tensor) else repr(t) for t in inputs
    )
    return (tuple(modules), state, shapes)


def _trace(model: nn.Module, example: Any) -> TraceResult:
    """The trace; where it fails, a norm lmc cannot fold is named if the model has one."""
    try:
        return trace_model(model, example)
    except LmcError as exc:
        for name, module in model.named_modules():
            if isinstance(module, NORM_TYPES) and not isinstance(
                module, (nn.LayerNorm, nn.RMSNorm)
            ):
                raise LmcError(
                    f"canonical form: {name!r} is a {type(module).__name__}, not a LayerNorm or "
                    f"RMSNorm over the features ({exc})"
                ) from exc
        raise


def traced_layout(
    model: nn.Module, example_input: Any = None, trace: TraceResult | None = None
) -> StreamLayout:
    """The :class:`StreamLayout` of ``model`` read off its traced graph (module docstring), on
    ``example_input`` (default: one made from the model, :func:`lmc.perm.symmetries.example_inputs.
    example_input`); ``trace``: its trace on that input, when the caller has it. Cached by the
    model's structure; ``LmcError`` (also cached) where the stream cannot be folded."""
    if example_input is None:
        example_input = make_example(model)
    key = structure_key(model, example_input)
    hit = _CACHE.get(key)
    if hit is None:
        try:
            if trace is None or trace.graph is None:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # the spec's derivation warns
                    trace = _trace(model, example_input)
            hit = layout_from_trace(model, trace, example_input)
        except LmcError as exc:
            hit = exc
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = hit
    if isinstance(hit, LmcError):
        raise LmcError(str(hit))
    return hit


__all__ = [
    "NORM_KINDS",
    "EmbeddingNorm",
    "LayerScale",
    "NormSite",
    "Reader",
    "StreamLayout",
    "layout_from_trace",
    "structure_key",
    "traced_layout",
    "unwrap",
]
