"""The handler table and its one dispatch.

Every op the tracer understands has one entry in :data:`HANDLERS`: a module type (matched
along the module's class hierarchy, so subclasses of a known module are known too) or a
function / method name (``torch.flatten(x)``, ``x.flatten()`` and ``F.relu`` are found by
their names). :func:`dispatch` looks the node up and calls its handler; a node without one is
not understood: the groups that flow into it stay unpermuted, with a warning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from torch import fx, nn

from . import attention, flow, layers
from .names import op_name
from .state import TraceState
from .tables import (
    ACTIVATION_MODULES,
    CATS,
    CHANNEL_NORMS,
    CONV_FUNCTIONS,
    CONV_TRANSPOSES,
    CONVS,
    DATA_FIRST_ONLY,
    EXPANDS,
    LAST_DIMS_NORMS,
    MATMULS,
    METADATA,
    PERMUTES,
    POINTWISE,
    REDUCTIONS,
    RESHAPE_MODULES,
    RESHAPES,
    SPATIAL_FUNCTIONS,
    SPATIAL_MODULES,
    TRANSPOSES,
)

Handler = Callable[[TraceState, fx.Node], None]
Key = type | str


def _table(*groups: tuple[Iterable[Key], Handler]) -> dict[Key, Handler]:
    table: dict[Key, Handler] = {}
    for keys, handler in groups:
        for key in keys:
            if key in table:
                raise ValueError(f"two handlers for {key!r}")
            table[key] = handler
    return table


HANDLERS: dict[Key, Handler] = _table(
    # modules, by type
    ((nn.MultiheadAttention,), attention.multihead_attention_module),
    ((nn.Linear,), layers.linear_module),
    ((*CONVS, *CONV_TRANSPOSES), layers.conv_module),
    ((nn.Embedding,), layers.embedding_module),
    (CHANNEL_NORMS, layers.channel_norm_module),
    ((nn.GroupNorm,), layers.group_norm_module),
    (LAST_DIMS_NORMS, layers.layer_norm_module),
    ((nn.PReLU,), layers.prelu_module),
    (ACTIVATION_MODULES, flow.pointwise_module),
    (SPATIAL_MODULES, flow.spatial_module),
    (RESHAPE_MODULES, flow.reshape),
    # functions and methods, by name
    (("linear",), layers.linear_function),
    (CONV_FUNCTIONS, layers.conv_function),
    (MATMULS, layers.matmul),
    (("layer_norm",), layers.layer_norm_function),
    (("rms_norm",), layers.rms_norm_function),
    (("batch_norm",), layers.batch_norm_function),
    (POINTWISE, flow.pointwise_op),
    (DATA_FIRST_ONLY, flow.data_first),
    (SPATIAL_FUNCTIONS, flow.spatial_function),
    (RESHAPES, flow.reshape),
    (EXPANDS, flow.expand),
    (PERMUTES, flow.permute),
    (TRANSPOSES, flow.transpose),
    (("t", "numpy_T"), flow.transpose_2d),
    (REDUCTIONS, flow.reduce),
    (CATS, flow.cat),
    (("getitem",), flow.getitem),
    (("slice",), flow.slice_),
    (("select",), flow.select),
    (("alias",), flow.alias),
    (("embedding",), layers.embedding_function),
    (("getattr",), flow.getattr_),
    (METADATA, flow.metadata),
    (("scaled_dot_product_attention",), attention.sdpa),
    (("chunk", "split", "split_with_sizes", "unbind"), attention.chunk),
    (("addmm",), layers.addmm),
    (("repeat_interleave",), attention.repeat_interleave),
    (("masked_fill", "masked_fill_"), flow.pointwise_op),
    (("stack",), attention.stack),
)

# Handlers that follow values split into attention heads or tuples of layouts; any other
# handler given one leaves what flows in unpermuted.
HEAD_AWARE: frozenset[Handler] = frozenset(
    {
        flow.pointwise_op,
        flow.pointwise_module,
        flow.data_first,
        flow.reshape,
        flow.reduce,
        flow.expand,
        flow.permute,
        flow.transpose,
        flow.transpose_2d,
        flow.getitem,
        flow.slice_,
        flow.select,
        flow.alias,
        flow.metadata,
        flow.getattr_,
        layers.matmul,
        attention.sdpa,
        attention.chunk,
        attention.multihead_attention_module,
        layers.addmm,
        attention.repeat_interleave,
        attention.stack,
    }
)


def handler_for(st: TraceState, node: fx.Node) -> Handler | None:
    """The handler of a ``call_module``, ``call_function`` or ``call_method`` node."""
    if node.op == "call_module":
        for cls in type(st.module(node)).__mro__:
            if cls in HANDLERS:
                return HANDLERS[cls]
        return None
    return HANDLERS.get(op_name(node))


def dispatch(st: TraceState, node: fx.Node) -> None:
    """Follow ``node`` with its handler, or leave what flows into it unpermuted."""
    handler = handler_for(st, node)
    if handler is not None and handler not in HEAD_AWARE:
        if not all(st.plain(i) for i in st.tensor_inputs(node)):
            return st.unknown(node, "receives attention heads or a tuple it does not follow")
    if handler is not None:
        handler(st, node)
    elif node.op == "call_module":
        st.unknown(node, f"is a module of unknown type {type(st.module(node)).__name__}")
    else:
        st.unknown(node)
