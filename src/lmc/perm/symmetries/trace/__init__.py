"""Derive a model's :class:`~lmc.perm.PermutationSpec` by tracing it with ``torch.fx``.

How it works, and where each decision lives:

1. ``walk``: the model is traced with ``torch.fx.symbolic_trace`` -- or, where that fails
   (Hugging Face GPT-2, BERT, ViT, ...), exported with ``torch.export`` into a graph of ATen
   ops that the same handlers read by name (``export``) -- and run once on the example input
   through a shape-recording interpreter (in eval mode, flags restored), so every value has a
   shape; then the graph's nodes are visited in order.
2. ``state``: each tensor value gets a *layout*: the dimension that carries permutable units
   (its channels) and the segments that tile it, each a block of units of one *group*. Groups
   live in a union-find; each axis of each parameter or floating buffer is bound to the
   segments that index it. Two things bound to one axis are unified (same permutation).
3. ``handlers``: one table maps each op -- a module type, or a function / method name -- to
   its handler, with one dispatch for ``call_module``, ``call_function`` and ``call_method``.
   ``layers`` holds the handlers of ops with weights (a Linear / Conv / Embedding output
   *opens* a group; norms bind their per-channel parameters to the group they carry),
   ``flow`` those without (elementwise ops carry or unite groups, reshapes and transposes
   move them, reductions over the units drop them, ``cat`` concatenates them); ``tables``
   lists which torch ops are of which kind; ``attention`` follows attention heads (split
   with ``view``, products of computed tensors solved like an einsum, ``nn.MultiheadAttention``,
   fused projections cut with ``chunk`` / ``split``) and nests the q/k and v/o dims in them;
   ``attention_inputs`` finds, before the walk, the values that feed attention; ``names``
   gives the name each op is known by.
4. ``result``: every live group of two or more units becomes a permutation of the spec.

What is left unpermuted, and why: the input (the data's order is given) and every group that
reaches the output (the caller sees its order); anything a handler cannot prove safe -- an
unknown module, function or method that receives permuted channels, a grouped convolution,
GroupNorm with 1 < G < C, a slice of the channels, a
permuted value combined with a fixed tensor -- *freezes* the groups it touches, with a
``warnings.warn`` naming the node. Frozen groups stay unpermuted, so a derived spec never
changes the function the model computes.
"""

from __future__ import annotations

from .result import TraceResult
from .state import LayerRecord
from .walk import spec_from_model, trace_model

__all__ = ["LayerRecord", "TraceResult", "spec_from_model", "trace_model"]
