"""Axis roles: how each permuted axis of a model's state transforms under its group's map.

``out`` (covariant: a layer's output rows and bias, an embedding's features, the q side of
q/k), ``in`` (contravariant: a layer's input columns, the k side) or ``norm`` (an elementwise
gain or bias of a norm); see :mod:`lmc.perm.symmetries.symmetry_spec` for the conventions. Roles are
derived per tensor from the layer that owns it, else from the tracer's records of how it was used,
else ``out``.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from .permutation_spec import PermutationSpec

NORM_TYPES: tuple[type[nn.Module], ...] = (
    nn.LayerNorm,
    nn.GroupNorm,
    nn.modules.batchnorm._NormBase,
    nn.RMSNorm,
    nn.LocalResponseNorm,
)

RoleKey = tuple[str, int]


def _owner(model: nn.Module, name: str) -> tuple[nn.Module | None, str, str]:
    module_name, _, param = name.rpartition(".")
    try:
        return model.get_submodule(module_name), module_name, param
    except AttributeError:
        return None, module_name, param


def layer_role(model: nn.Module, name: str, axis: int) -> str | None:
    """The role of axis ``axis`` of the state tensor ``name`` from the layer that owns it, or
    ``None`` when no known layer owns it (see the module docstring)."""
    module, _, param = _owner(model, name)
    if module is None:
        return None
    if isinstance(module, NORM_TYPES):
        return "norm"
    dense = isinstance(module, (nn.Linear, nn.modules.conv._ConvNd, nn.MultiheadAttention))
    if param.endswith("bias"):  # a layer's bias (MultiheadAttention: in_proj_bias) follows rows
        return "out" if dense or _is_conv1d(module) else None
    if isinstance(module, nn.modules.conv._ConvTransposeNd):
        return {0: "in", 1: "out"}.get(axis)
    if isinstance(module, (nn.Linear, nn.modules.conv._ConvNd)) or (
        isinstance(module, nn.MultiheadAttention) and param.endswith("weight")
    ):
        return {0: "out", 1: "in"}.get(axis)
    if isinstance(module, nn.Embedding):
        return "out" if axis == 1 else None
    if _is_conv1d(module):
        return {0: "in", 1: "out"}.get(axis)
    return None


def _is_conv1d(module: nn.Module) -> bool:
    """Hugging Face's ``Conv1D`` (GPT-2): ``y = x @ W + b`` with ``W`` of shape (in, out)."""
    cls = type(module)
    return cls.__name__ == "Conv1D" and cls.__module__.startswith("transformers.")


def _record_roles(trace: Any, model: nn.Module) -> dict[RoleKey, set[str]]:
    """Roles the tracer's layer records give (producer axis: ``out``; consumer: ``in``), for
    every name of each tensor (tied tensors have several)."""
    names: dict[int, list[str]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        names.setdefault(id(tensor), []).append(name)
    state = model.state_dict(keep_vars=True)
    out: dict[RoleKey, set[str]] = {}
    for records, role in ((trace.producers, "out"), (trace.consumers, "in")):
        for rec in records:
            tensor = state.get(rec.weight)
            for name in names.get(id(tensor), [rec.weight]):
                out.setdefault((name, rec.axis), set()).add(role)
    return out


def derive_roles(
    model: nn.Module, spec: PermutationSpec, trace: Any = None
) -> dict[RoleKey, tuple[str | None, ...]]:
    """Roles for every permuted axis of ``spec`` (see the module docstring); ``trace``: a
    :class:`~lmc.perm.TraceResult` of ``model`` for tensors no known layer owns."""
    recorded = _record_roles(trace, model) if trace is not None else {}
    roles: dict[RoleKey, list[str | None]] = {}
    for name, entries in spec.axes.items():
        for axis, entry in enumerate(entries):
            if entry is None:
                continue
            role = layer_role(model, name, axis)
            if role is None:
                seen = recorded.get((name, axis), set())
                role = seen.pop() if len(seen) == 1 else "out"
            roles[(name, axis)] = [role if s.perm is not None else None for s in entry]
    _split_query_key(spec, roles)
    return {k: tuple(v) for k, v in roles.items()}


def _split_query_key(spec: PermutationSpec, roles: dict[RoleKey, list[str | None]]) -> None:
    """Make the k side of each nested q/k group contravariant (in place; see the module
    docstring). A side is (owning layer, position of the group within the axis)."""
    for group in spec.heads:
        sides: dict[tuple[str, int], list[tuple[str, int, int]]] = {}
        for name, axis in spec.groups[group]:
            occurrence = 0
            for k, seg in enumerate(spec[name][axis]):
                if seg.perm != group:
                    continue
                key = (name.rpartition(".")[0], occurrence)
                sides.setdefault(key, []).append((name, axis, k))
                occurrence += 1
        members = [m for side in sides.values() for m in side]
        if len(sides) != 2 or any(roles[(n, a)][k] != "out" for n, a, k in members):
            continue
        for name, axis, k in list(sides.values())[1]:
            roles[(name, axis)][k] = "in"


__all__ = ["NORM_TYPES", "RoleKey", "derive_roles", "layer_role"]
