"""Which values of a graph feed attention: the values a product of attention reads (q, k and v
of ``F.scaled_dot_product_attention``, both operands of a product of two computed tensors:
``q @ k.transpose(-2, -1)``, ``attn @ v``) and those they are made of by ops that follow
attention heads (views, transposes, elementwise ops such as rotary embeddings, reductions such
as a norm per head) or join their pieces (``cat``: partial rotary embeddings, Phi-3's
``cat((rotated, passed), -1)``), back to the layers that computed them.

A view that makes room for one head (``(..., T, d) -> (..., T, 1, d)``) splits one key/value
head of multi-query attention off (:func:`.attention.split_one_head`) only where it feeds
attention; anywhere else it is a plain reshape (a branch stacked with ``cat``, a layer reading
it), as it always was.
"""

from __future__ import annotations

from torch import fx

from . import attention, flow, layers
from .handlers import HEAD_AWARE, handler_for
from .state import TraceState

#: handlers the walk back follows besides the head-aware ones
_JOINS = frozenset({flow.cat})
#: handlers of the products of attention, where the walk back starts and stops
_PRODUCTS = frozenset(
    {attention.sdpa, attention.multihead_attention_module, layers.matmul, layers.addmm}
)


def _computed(gm: fx.GraphModule) -> set[fx.Node]:
    """The nodes whose value depends on the model's input (not on state tensors alone)."""
    out: set[fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op == "placeholder" or any(a in out for a in node.all_input_nodes):
            out.add(node)
    return out


def attention_inputs(st: TraceState) -> frozenset[fx.Node]:
    """The nodes of ``st.gm`` whose values feed attention (module docstring)."""
    computed = _computed(st.gm)
    stack: list[fx.Node] = []
    for node in st.gm.graph.nodes:
        if node.op not in ("call_function", "call_method", "call_module"):
            continue
        handler = handler_for(st, node)
        if handler is attention.sdpa:
            stack.extend(st.arg(node, i, k) for i, k in enumerate(("query", "key", "value")))
        elif handler is layers.matmul and len(node.args) >= 2:
            if all(isinstance(a, fx.Node) and a in computed for a in node.args[:2]):
                stack.extend(node.args[:2])
    seen: set[fx.Node] = set()
    while stack:
        node = stack.pop()
        if not isinstance(node, fx.Node) or node in seen or node not in computed:
            continue
        seen.add(node)
        if node.op not in ("call_function", "call_method", "call_module"):
            continue
        handler = handler_for(st, node)
        if (handler in HEAD_AWARE or handler in _JOINS) and handler not in _PRODUCTS:
            stack.extend(node.all_input_nodes)
    return frozenset(seen)


__all__ = ["attention_inputs"]
