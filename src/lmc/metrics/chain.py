"""The stacked fast path for plain chains of Linear layers and activations.

k models of one architecture, their weights stacked on a leading axis of size k (as
:func:`lmc.merge.lerp_stack` gives them for k points theta(lam) of a path), are evaluated on one
batch of examples layer by layer: each model's Linear is one ``addmm`` (bias fused, the kernel
``nn.Linear`` itself uses) into a reused buffer, and activations run in place, model by model
while its slice is hot in cache. This is faster than ``torch.vmap`` over
``torch.func.functional_call`` for MLPs (see benchmarks/path_eval.py) and gives the same numbers
within float32 rounding.

:func:`chain_plan` says whether a model is such a chain; :func:`chain_forward` runs one.
Shapes: stacked entries ``(k, *shape)``, inputs ``(b, ...)``, outputs ``(k, b, out)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

#: A chain: ``(qualified module name, module)`` in forward order (:func:`chain_plan`).
ChainPlan = list[tuple[str, nn.Module]]

_ACTIVATIONS: dict[type, Callable[[nn.Module, torch.Tensor], torch.Tensor]] = {
    nn.ReLU: lambda m, h: h.relu_(),
    nn.LeakyReLU: lambda m, h: F.leaky_relu_(h, m.negative_slope),
    nn.Tanh: lambda m, h: h.tanh_(),
    nn.Sigmoid: lambda m, h: h.sigmoid_(),
    nn.GELU: lambda m, h: F.gelu(h, approximate=m.approximate),
}
#: whether the activation above works in place (GELU returns a new tensor)
_IN_PLACE = {nn.ReLU: True, nn.LeakyReLU: True, nn.Tanh: True, nn.Sigmoid: True, nn.GELU: False}
_PASS_THROUGH = (nn.Identity, nn.Dropout)


def chain_plan(model: nn.Module) -> ChainPlan | None:
    """The model as a plain chain of modules the stacked fast path knows, or ``None``.

    The forward must trace (``torch.fx``) to a sequence ``input -> m1 -> m2 -> ... -> output``
    of calls to submodules, each taking only the previous result, where every module is a
    ``Linear``, ``LayerNorm`` over the last axis, an activation (ReLU, LeakyReLU, GELU, Tanh,
    Sigmoid), ``Identity``/``Dropout`` (eval), and ``Flatten`` only before the first ``Linear``.
    MLPs of :mod:`lmc.models` without BatchNorm qualify. Anything else returns ``None`` (the
    generic ``torch.vmap`` path is used, :func:`lmc.metrics.engine.stacked_logits`).
    """
    import torch.fx

    try:
        graph = torch.fx.symbolic_trace(model).graph
    except Exception:  # noqa: BLE001 - untraceable forward: use the generic path
        return None
    modules = dict(model.named_modules())
    plan: ChainPlan = []
    previous = None
    for node in graph.nodes:
        if node.op == "placeholder":
            if previous is not None:
                return None
            previous = node
        elif node.op == "call_module":
            module = modules[node.target]
            if node.args != (previous,) or node.kwargs:
                return None
            linear_seen = any(isinstance(m, nn.Linear) for _, m in plan)
            ok = (
                isinstance(module, (nn.Linear, *_PASS_THROUGH))
                or type(module) in _ACTIVATIONS
                or (isinstance(module, nn.Flatten) and not linear_seen)
                or (isinstance(module, nn.LayerNorm) and len(module.normalized_shape) == 1)
            )
            if not ok:
                return None
            plan.append((node.target, module))
            previous = node
        elif node.op == "output":
            if node.args != (previous,):
                return None
        else:
            return None
    if not any(isinstance(m, nn.Linear) for _, m in plan):
        return None
    return plan


class ChainWorkspace:
    """Two reusable flat buffers for the chain path's layer outputs (ping-pong).

    Reusing them avoids allocating (and, for large tensors, page-faulting) fresh memory for every
    layer of every batch.
    """

    def __init__(self) -> None:
        self.flat: list[torch.Tensor | None] = [None, None]

    def view(self, slot: int, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        numel = math.prod(shape)
        buf = self.flat[slot]
        if buf is None or buf.numel() < numel or buf.dtype != like.dtype:
            buf = self.flat[slot] = torch.empty(numel, dtype=like.dtype, device=like.device)
        return buf[:numel].view(shape)


def chain_forward(
    plan: ChainPlan,
    stacked: dict[str, torch.Tensor],
    x: torch.Tensor,
    workspace: ChainWorkspace | None = None,
) -> torch.Tensor:
    """k stacked models of a chain (:func:`chain_plan`) on one batch of examples: (k, b, out).

    ``stacked``: the models' state entries ``{name: (k, *shape)}`` (e.g. from
    :func:`lmc.merge.lerp_stack`); ``x``: ``(b, ...)`` inputs on the weights' device.
    Layer by layer, each model's Linear is one ``addmm`` (bias fused, the same kernel
    ``nn.Linear`` uses) written into a reused buffer, and activations run in place on it, model
    by model while its slice is hot in cache. The input is shared by all k models until the
    first Linear. The result is a view into ``workspace``: copy it before the next call.
    """
    workspace = workspace or ChainWorkspace()
    k = next(iter(stacked.values())).shape[0]
    h = x
    shared = True  # h is the one input of all k models (no leading k axis yet)
    h_slot: int | None = None  # which workspace buffer h lives in
    fresh = False  # whether h is memory this function owns (in-place is safe)
    for name, module in plan:
        prefix = f"{name}." if name else ""
        if isinstance(module, nn.Flatten):
            h = module(h)
        elif isinstance(module, nn.Linear):
            w = stacked[prefix + "weight"]
            bias = stacked.get(prefix + "bias")
            slot = 1 if h_slot == 0 else 0
            rows = h.shape[-2] if not shared else h.shape[0]
            out = workspace.view(slot, (k, rows, w.shape[1]), w)
            for j in range(k):
                src = h if shared else h[j]
                if bias is None:
                    torch.mm(src, w[j].t(), out=out[j])
                else:
                    torch.addmm(bias[j], src, w[j].t(), out=out[j])
            h, h_slot, shared, fresh = out, slot, False, True
        elif isinstance(module, nn.LayerNorm):
            if shared:
                h = h.unsqueeze(0).expand(k, *h.shape)
            weight = stacked.get(prefix + "weight")
            bias = stacked.get(prefix + "bias")
            h = torch.stack(
                [
                    F.layer_norm(
                        h[j],
                        module.normalized_shape,
                        None if weight is None else weight[j],
                        None if bias is None else bias[j],
                        module.eps,
                    )
                    for j in range(k)
                ]
            )
            h_slot, shared, fresh = None, False, True
        elif type(module) in _ACTIVATIONS:
            if shared:
                h = h.unsqueeze(0).expand(k, *h.shape)
                shared, fresh = False, False
            apply = _ACTIVATIONS[type(module)]
            if _IN_PLACE[type(module)]:
                if not fresh:
                    h, h_slot, fresh = h.clone(), None, True
                for j in range(k):  # model by model, while its slice is hot in cache
                    apply(module, h[j])
            else:
                h = torch.stack([apply(module, h[j]) for j in range(k)])
                h_slot, fresh = None, True
    if shared:  # no Linear ran: cannot happen for a valid plan
        h = h.unsqueeze(0).expand(k, *h.shape)
    return h
