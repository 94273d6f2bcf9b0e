"""A graph for models ``torch.fx.symbolic_trace`` cannot trace, through ``torch.export``.

Hugging Face models (GPT-2, BERT, ViT, ...) branch on their inputs and config in Python and do
not trace symbolically; ``torch.export`` runs them on the example input instead and records the
ATen ops they call (``aten.linear``, ``aten.addmm``, ``aten.view``, ``aten.split``,
``aten.scaled_dot_product_attention``, ...). The tracer's handlers know these ops by their
names (:func:`.names.function_name`), so the exported graph is walked like a traced one.

The exported program takes the parameters and buffers as inputs; :func:`export_graph` turns
each of those inputs back into a ``get_attr`` node reading the model's own tensor under its
state-dict name, so the walk binds them as usual. A tied weight appears once in the export
(under one of its names); the walk knows its other names from the state dict.

The graph is specialised to the example input's shape: branches on shapes and config values
are resolved at export time (a branch on the data's values is refused by ``torch.export``), so a
model whose code branches on the input's shape is described for that shape only; pass an
example of the shape (not the batch size) the model is used with.
While exporting, the model is in eval mode with gradients on (torch's fused inference paths,
which hide the layers, are taken only without them) and, for a model with a Hugging Face
``config``, ``use_cache`` is off (the key/value cache object is not a tensor output); both are
restored.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import fx, nn

from lmc.config import LmcError
from lmc.models import eval_mode


@contextlib.contextmanager
def _no_cache(model: nn.Module) -> Iterator[None]:
    """``config.use_cache = False`` on every submodule with a Hugging Face config, restored."""
    saved: list[tuple[Any, Any]] = []
    seen: set[int] = set()
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is None or id(config) in seen or not hasattr(config, "use_cache"):
            continue
        seen.add(id(config))
        saved.append((config, config.use_cache))
        config.use_cache = False
    try:
        yield
    finally:
        for config, value in saved:
            config.use_cache = value


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def export_graph(model: nn.Module, inputs: tuple[Any, ...]) -> fx.GraphModule:
    """The ATen graph of ``model`` on ``inputs``, reading its state through ``get_attr`` nodes
    named as in ``model.state_dict()`` (see the module docstring)."""
    try:
        # with gradients on: torch's fused inference paths (nn.TransformerEncoderLayer's
        # ``_transformer_encoder_layer_fwd``) are taken only without them, and hide the layers
        with eval_mode(model), _no_cache(model), torch.enable_grad():
            program = torch.export.export(model, tuple(inputs), strict=False)
    except Exception as exc:  # noqa: BLE001 - export raises many kinds of errors
        raise LmcError(
            f"torch.export could not trace {type(model).__name__} "
            f"({_first_line(exc)}); check the example input, or write the permutation spec by "
            "hand with lmc.perm.PermutationSpec.from_dict"
        ) from exc
    sig = program.graph_signature
    targets: dict[str, str] = {
        **sig.inputs_to_parameters,
        **sig.inputs_to_buffers,
        **sig.inputs_to_lifted_tensor_constants,
        **getattr(sig, "inputs_to_lifted_custom_objs", {}),
    }
    values: dict[str, Any] = {}
    named = dict(model.named_parameters(remove_duplicate=False))
    named.update(model.named_buffers(remove_duplicate=False))
    for target in targets.values():
        if target in named:
            values[target] = named[target]
        elif target in program.constants:
            values[target] = program.constants[target]
        else:
            values[target] = program.state_dict[target]
    graph = fx.Graph()  # a copy owned by no module yet, with the state read by get_attr
    copies: dict[fx.Node, fx.Node] = {}
    for node in program.graph_module.graph.nodes:
        if node.op == "placeholder" and node.name in targets:
            copies[node] = graph.get_attr(targets[node.name])
            copies[node].meta = dict(node.meta)
        else:
            copies[node] = graph.node_copy(node, lambda n: copies[n])
    return fx.GraphModule(values, graph)
