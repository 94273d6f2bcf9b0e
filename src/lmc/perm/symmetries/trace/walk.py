"""The walk: trace the model, give every value a shape, visit the graph's nodes in order.

The graph comes from ``torch.fx.symbolic_trace`` or, for a model that does not trace
symbolically (Hugging Face models), from ``torch.export`` (:mod:`.export`); ``tracer`` picks
one (``"auto"``: the first, else the second).

``placeholder`` nodes (the inputs) are never permuted; ``get_attr`` nodes that read a state
tensor become *leaves* that later ops may bind; every call goes through
:func:`.handlers.dispatch`; the ``output`` node freezes every group that reaches it (the
model's outputs keep their order) and fixes any state tensor returned as is.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import fx, nn
from torch.fx.node import map_aggregate
from torch.fx.passes.shape_prop import TensorMetadata

from lmc.config import LmcError
from lmc.models import eval_mode

from ..permutation_spec import PermutationSpec
from .attention_inputs import attention_inputs
from .export import export_graph
from .handlers import HANDLERS, dispatch
from .result import TraceResult, build_result
from .state import TraceState

TRACERS = ("auto", "fx", "export")


class _Tracer(fx.Tracer):
    """``torch.fx``'s tracer, which keeps every ``torch.nn`` module whole (a leaf), except
    those the walk has no handler for that are made of modules (``nn.TransformerEncoderLayer``):
    traced into, so the walk sees their layers. Where that fails (their Python branches on
    the input), the model is exported instead (:func:`graph_for`)."""

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        if not super().is_leaf_module(m, module_qualified_name):
            return False
        if any(cls in HANDLERS for cls in type(m).__mro__):
            return True
        return not any(True for _ in m.children())


def _symbolic_trace(model: nn.Module) -> fx.GraphModule:
    try:
        tracer = _Tracer()
        graph = tracer.trace(model)
        name = type(model).__name__
        return fx.GraphModule(tracer.root, graph, name)
    except Exception as exc:  # noqa: BLE001 - fx raises many kinds of errors
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise LmcError(
            f"torch.fx could not trace {type(model).__name__} ({first}); write the "
            "permutation spec by hand with lmc.perm.PermutationSpec.from_dict"
        ) from exc


def graph_for(
    model: nn.Module, inputs: tuple[Any, ...], tracer: str = "auto"
) -> tuple[fx.GraphModule, str]:
    """``(graph, "fx" or "export")``: the graph to walk, ``torch.fx``'s, ``torch.export``'s,
    or (``auto``) fx's when it traces, else export's. An fx graph runs on inputs of any shape;
    an export graph is specialised to the shapes of ``inputs`` (:mod:`.export`)."""
    if tracer not in TRACERS:
        raise LmcError(f"tracer must be one of {', '.join(TRACERS)}, got {tracer!r}")
    if tracer == "export":
        return export_graph(model, inputs), "export"
    try:
        return _symbolic_trace(model), "fx"
    except LmcError as fx_error:
        if tracer == "fx":
            raise
        try:
            return export_graph(model, inputs), "export"
        except LmcError as exc:
            raise LmcError(f"{exc} (torch.fx could not trace it either)") from fx_error


def _tensor_meta(value: Any) -> Any:
    """What the trace reads of a tensor (its shape and dtype), in torch's ``TensorMetadata``."""
    if not isinstance(value, torch.Tensor):
        return value
    stride = value.stride() if value.layout == torch.strided else ()
    return TensorMetadata(
        value.shape, value.dtype, value.requires_grad, stride, None, value.is_quantized, {}
    )


class _ShapeRecorder(fx.Interpreter):
    """``torch.fx.passes.shape_prop.ShapeProp`` without its symbolic-shape support: that
    imports sympy on the first call (about 0.6 s of a process's first alignment), and the trace
    reads only each value's shape."""

    def run_node(self, n: fx.Node) -> Any:
        result = super().run_node(n)
        found: list[bool] = []

        def record(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                found.append(True)
            return _tensor_meta(value)

        meta = map_aggregate(result, record)
        if found:
            n.meta["tensor_meta"] = meta
        return result


def _propagate_shapes(model: nn.Module, gm: fx.GraphModule, inputs: tuple[Any, ...]) -> None:
    """Run ``gm`` once so each node's ``tensor_meta`` holds its value's shape; in eval mode
    (no running-statistics update, deterministic dropout) with every flag restored after."""
    try:
        with eval_mode(model), torch.no_grad():
            _ShapeRecorder(gm).run(*inputs)
    except Exception as exc:  # noqa: BLE001
        raise LmcError(
            f"running {type(model).__name__} on the example input failed ({exc}); pass an "
            "input batch of the shape the model expects"
        ) from exc


def walk(st: TraceState) -> None:
    """Visit every node of ``st.gm`` in order, updating ``st``."""
    for node in st.gm.graph.nodes:
        if node.op == "placeholder":
            st.env[node] = None
        elif node.op == "get_attr":
            if node.target in st.alias:
                st.leaf[node] = node.target
            st.env[node] = None
        elif node.op == "output":
            for inp in st.tensor_inputs(node):
                lay = st.layout(inp)
                st.freeze_segs(lay.segs if lay is not None else None)
                st.fix_leaf(inp)
        else:
            dispatch(st, node)


def trace_model(model: nn.Module, example_input: Any, *, tracer: str = "auto") -> TraceResult:
    """Trace ``model`` on ``example_input`` (a tensor or a tuple of tensors); derive its spec.

    ``tracer``: ``"fx"`` (``torch.fx.symbolic_trace``), ``"export"`` (``torch.export``, for
    models such as Hugging Face's that do not trace symbolically) or ``"auto"`` (fx, falling
    back to export when fx cannot trace). The model's train/eval flags and weights are left
    as they were (it runs in eval mode under ``no_grad``). Warnings name the nodes that left
    groups unpermuted.
    """
    inputs = example_input if isinstance(example_input, tuple) else (example_input,)
    gm, _ = graph_for(model, inputs, tracer)
    _propagate_shapes(model, gm, inputs)
    st = TraceState(gm, model.state_dict(keep_vars=True))
    st.feeds_attention = attention_inputs(st)
    walk(st)
    result = build_result(st)
    for message in result.warnings:
        warnings.warn(message, stacklevel=3)
    return result


def spec_from_model(
    model: nn.Module, example_input: Any, *, tracer: str = "auto"
) -> PermutationSpec:
    """The :class:`PermutationSpec` of ``model``, derived by tracing it with ``torch.fx`` (or
    ``torch.export`` where fx cannot trace it; ``tracer`` as in :func:`trace_model`).

    ``example_input``: a small batch (two rows suffice) of what the model takes (token ids
    ``(N, L)`` for a Hugging Face language model, ``pixel_values`` for a ViT). Every
    floating parameter and buffer is in the spec; groups the tracer cannot prove safe are left
    unpermuted with a warning, so ``apply_permutation`` with any permutation of this spec
    leaves the model's function unchanged.
    """
    return trace_model(model, example_input, tracer=tracer).spec
