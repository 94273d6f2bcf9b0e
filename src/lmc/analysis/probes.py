"""Which layers the analysis looks at, and forward hooks that capture them batch by batch.

Zoo models declare their probe points (``lmc.models.probe_points``). For any other model
``derive_probe_points`` builds them from the module structure:

- every ``nn.Linear`` / ``nn.Conv1d/2d/3d`` starts a layer, in the order the modules run in a
  forward pass on an example input (or, without one, in registration order);
- the first activation module (ReLU, GELU, Tanh, ...) that runs after it, before the next weight
  module, is the layer's activation: its input is the pre-activation z~_l and its output f_l.
  Normalisation or pooling modules in between are part of the layer;
- a weight module followed by no activation is a ``hidden`` layer whose output is the weight
  module's own output (no pre-activation), except the last weight module, which is the logits.

Activations must be modules (``nn.ReLU()``), not functional calls (``F.relu``), to be found.
The derived points use the same ``ProbePoint`` record as the zoo; ``layer`` counts weight
modules 1..L along the order above. With an example input, a layer whose weight module is an
``nn.Linear`` fed more than two dims (n, T, d) -- a transformer's -- gets the ``tokens``
layout: Linear maps act on the last dim, so its features are last.

Layouts (``ProbePoint.layout``): the recorder hands every tensor on features-first, (n, d) or
(n, d, *positions). A ``tokens`` point's (n, T, d) tensors become (n, d, T), so tokens are
positions, exactly as the spatial positions of a convolution's feature map.

A probe point gives up to three tensors per batch and model (see ``Capture``): the output
f_l, the pre-activation z~_l (input of the activation module) and the layer input z_{l-1}
(input of the weight module, whose weight W_l the reciprocal and commutativity terms use).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from lmc.config import LmcError
from lmc.models import ProbePoint, eval_mode
from lmc.models.transformer import Attention

WEIGHT_TYPES = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
ACTIVATION_TYPES = (
    nn.ReLU,
    nn.ReLU6,
    nn.LeakyReLU,
    nn.PReLU,
    nn.ELU,
    nn.SELU,
    nn.CELU,
    nn.GELU,
    nn.SiLU,
    nn.Mish,
    nn.Softplus,
    nn.Tanh,
    nn.Sigmoid,
    nn.Hardtanh,
    nn.Hardswish,
    nn.Hardsigmoid,
)


def activation_name(module: nn.Module | None) -> str | None:
    """Short lower-case name of an activation module (``relu``, ``gelu``, ...; ``attention``
    for the heads of a transformer), or ``None``."""
    if module is None:
        return None
    names = {
        nn.ReLU: "relu",
        nn.LeakyReLU: "leaky_relu",
        nn.GELU: "gelu",
        nn.SiLU: "silu",
        Attention: "attention",
    }
    return names.get(type(module), type(module).__name__.lower())


def resolve_probe_points(
    model: nn.Module, example_input: torch.Tensor | None = None
) -> list[ProbePoint]:
    """The model's own probe points if it declares them, else ``derive_probe_points``."""
    if hasattr(model, "probe_points"):
        return list(model.probe_points())
    return derive_probe_points(model, example_input)


def _execution_order(
    model: nn.Module, example_input: torch.Tensor
) -> tuple[list[str], dict[str, int]]:
    """Qualified names of leaf modules in the order a forward pass first calls them, and the
    number of dims of each one's first input tensor at that call."""
    order: list[str] = []
    ndims: dict[str, int] = {}
    handles = []
    for name, module in model.named_modules():
        if name and not any(True for _ in module.children()):

            def hook(_module, inputs, name=name):
                if name not in ndims:
                    first = inputs[0] if inputs else None
                    ndims[name] = first.dim() if isinstance(first, torch.Tensor) else 0
                    order.append(name)

            handles.append(module.register_forward_pre_hook(hook))
    try:
        with torch.no_grad(), eval_mode(model):
            model(example_input)
    finally:
        for handle in handles:
            handle.remove()
    return order, ndims


def derive_probe_points(
    model: nn.Module, example_input: torch.Tensor | None = None
) -> list[ProbePoint]:
    """Probe points of a model without ``probe_points()`` (rules in the module docstring).

    ``example_input`` (a small batch) lets the rules follow the real execution order; without
    it, module registration order is used. Raises ``LmcError`` for a model with no Linear/Conv.
    """
    modules = dict(model.named_modules())
    ndims: dict[str, int] = {}
    if example_input is not None:
        order, ndims = _execution_order(model, example_input)
    else:
        order = [n for n, m in modules.items() if n and not any(True for _ in m.children())]
    weights = [n for n in order if isinstance(modules[n], WEIGHT_TYPES)]
    if not weights:
        raise LmcError(
            f"{type(model).__name__} has no Linear or Conv layer to analyse: add a "
            "probe_points() method returning lmc.models.ProbePoint records"
        )
    points: list[ProbePoint] = []
    for layer, weight in enumerate(weights, start=1):
        tokens = isinstance(modules[weight], nn.Linear) and ndims.get(weight, 2) > 2
        layout = "tokens" if tokens else "channels"
        if layer == len(weights):
            points.append(ProbePoint("logits", layer, "logits", weight, weight, None, layout))
            break
        start = order.index(weight) + 1
        stop = order.index(weights[layer])
        acts = [n for n in order[start:stop] if isinstance(modules[n], ACTIVATION_TYPES)]
        name = f"layer{layer}"
        if acts:
            points.append(ProbePoint(name, layer, "hidden", acts[0], weight, acts[0], layout))
        else:
            points.append(ProbePoint(name, layer, "hidden", weight, weight, None, layout))
    return points


def features_first(tensor: torch.Tensor, layout: str) -> torch.Tensor:
    """``tensor`` as the analysis reads it: unchanged for the ``channels`` layout; a
    ``tokens`` tensor (n, T, d) as (n, d, T), a view (tokens become positions); a ``heads``
    tensor (n, heads, T, d_h) as (n, heads · d_h, T), head-major features."""
    if layout == "tokens" and tensor.dim() > 2:
        return tensor.movedim(-1, 1)
    if layout == "heads" and tensor.dim() == 4:
        n, heads, length, head_dim = tensor.shape
        return tensor.transpose(2, 3).reshape(n, heads * head_dim, length)
    return tensor


@dataclass
class Capture:
    """The tensors of one probe point for one model and one batch, features first.

    ``output``: f_l, shape (n, d) or (n, C, *spatial) (a ``tokens`` point's (n, T, d) as
    (n, d, T); a ``heads`` point's (n, heads, T, d_h) as (n, heads · d_h, T)). ``pre``: z~_l
    (input of the activation) or ``None``; for a ``heads`` point, the tuple (q, k, v) of the
    heads' inputs as they were, (n, heads, T, d_h) each. ``inputs``: z_{l-1} (input of the
    weight module) or ``None``; same layout as ``output``.
    """

    output: torch.Tensor | None = None
    pre: torch.Tensor | tuple[torch.Tensor, ...] | None = None
    inputs: torch.Tensor | None = None


class Recorder:
    """Forward hooks on one model that keep the last batch's tensors of every probe point.

    Use as a context manager; ``captures[name]`` holds the ``Capture`` of probe point ``name``
    after each forward pass, features first (:func:`features_first`). Only the current batch is
    held: nothing accumulates.
    """

    def __init__(self, model: nn.Module, points: list[ProbePoint]) -> None:
        self.model = model
        self.points = points
        self.captures: dict[str, Capture] = {}
        self._handles: list = []
        modules = dict(model.named_modules())
        for point in points:
            for attr in ("output", "weight", "preactivation"):
                qualified = getattr(point, attr)
                if qualified is not None and qualified not in modules:
                    raise LmcError(
                        f"probe point {point.name!r} names module {qualified!r}, which "
                        f"{type(model).__name__} does not have; check its probe_points()"
                    )
        self._modules = modules

    def __enter__(self) -> Recorder:
        for point in self.points:
            capture = self.captures.setdefault(point.name, Capture())
            layout = point.layout
            self._hook_output(self._modules[point.output], capture, layout)
            if point.preactivation is not None:
                self._hook_input(self._modules[point.preactivation], capture, "pre", layout)
            if point.weight is not None:
                self._hook_input(self._modules[point.weight], capture, "inputs", layout)
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.captures.clear()

    def _hook_output(self, module: nn.Module, capture: Capture, layout: str) -> None:
        def hook(_module, _inputs, output):
            capture.output = features_first(output.detach(), layout)

        self._handles.append(module.register_forward_hook(hook))

    def _hook_input(self, module: nn.Module, capture: Capture, field: str, layout: str) -> None:
        # An in-place module overwrites its input: keep a copy of it then.
        copy = bool(getattr(module, "inplace", False))

        def hook(_module, inputs):
            if layout == "heads" and field == "pre":
                capture.pre = tuple(t.detach() for t in inputs)
                return
            tensor = inputs[0].detach()
            setattr(capture, field, features_first(tensor.clone() if copy else tensor, layout))

        self._handles.append(module.register_forward_pre_hook(hook))

    def run(self, x: torch.Tensor) -> dict[str, Capture]:
        """Forward ``x`` (no gradients) and return the captures of this batch."""
        for capture in self.captures.values():
            capture.output = capture.pre = capture.inputs = None
        self.model(x)
        return self.captures
