"""Which symmetry each group of a model has, and how each tensor axis transforms under it.

A :class:`SymmetrySpec` is a :class:`~lmc.perm.PermutationSpec` (which group indexes which
axis of which tensor) plus two things a permutation never needed:

- ``roles``: for every permuted axis, one role per segment of its entry --
  ``"out"`` (covariant: the axis holds coordinates of the group's units, ``x -> M x``: a
  layer's output rows and its bias, an embedding's features, a class token, the q side of
  q/k), ``"in"`` (contravariant: the axis reads the units, ``x -> M⁻ᵀ x``: a layer's input
  columns, the k side of q/k) or ``"norm"`` (an elementwise gain or bias of a norm: only a
  permutation may act). See :mod:`lmc.perm.transforms`.
- ``kinds``: for every group, the most general transform kind under which the model's
  function is unchanged: ``"invertible"`` for the dims within attention heads (q/k, v/o),
  ``"orthogonal"`` for the residual stream of a canonical pre-LN transformer
  (:mod:`lmc.perm.canonical`), ``"permutation"`` for everything else (MLP hidden units, heads
  as wholes, any stream that still passes through a LayerNorm).

Roles are derived per tensor from the layer that owns it: ``nn.Linear`` / ``nn.Conv*``
weights are ``(out, in, ...)``, transposed convolutions and Hugging Face's ``Conv1D``
``(in, out)``, an ``nn.Embedding`` weight's feature axis is ``out``, biases are ``out``, norm
parameters ``norm``; a tensor no known layer owns takes the tracer's record of how it was
used (an output or an input axis of a weight layer), else ``out`` (a vector added into the
stream: class tokens, position embeddings). A nested q/k group whose members are all ``out``
(q and k are both layer outputs) is split into its two sides (by layer and by position within
a fused qkv layer); the second side is ``in``, since ``qᵀk = (A q)ᵀ (A⁻ᵀ k)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch import nn

from lmc.config import LmcError

from .spec import PermutationSpec
from .transforms import KINDS, ROLES, kind_rank

NORM_TYPES: tuple[type[nn.Module], ...] = (
    nn.LayerNorm,
    nn.GroupNorm,
    nn.modules.batchnorm._NormBase,
    nn.RMSNorm,
    nn.LocalResponseNorm,
)

RoleKey = tuple[str, int]


@dataclass(frozen=True, eq=False)
class SymmetrySpec:
    """A permutation spec with axis roles and the admissible kind of each group (see the
    module docstring). ``roles[(name, axis)]`` holds one role (or ``None`` for a fixed
    segment) per segment of ``spec[name][axis]``; every permuted axis must have one."""

    spec: PermutationSpec
    roles: Mapping[RoleKey, tuple[str | None, ...]]
    kinds: Mapping[str, str]

    def __post_init__(self) -> None:
        roles = {(str(k[0]), int(k[1])): tuple(v) for k, v in self.roles.items()}
        for name, entries in self.spec.axes.items():
            for axis, entry in enumerate(entries):
                if entry is None:
                    continue
                got = roles.get((name, axis))
                if got is None or len(got) != len(entry):
                    raise LmcError(
                        f"symmetry spec: {name!r} axis {axis} needs one role per segment "
                        f"({len(entry)}), got {got!r}"
                    )
                for seg, role in zip(entry, got):
                    if seg.perm is not None and role not in ROLES:
                        raise LmcError(
                            f"symmetry spec: {name!r} axis {axis}: role {role!r} is not one of "
                            f"{', '.join(ROLES)}"
                        )
        kinds = dict(self.kinds)
        for group in self.spec.group_sizes:
            kinds.setdefault(group, "permutation")
            kind_rank(kinds[group])
        extra = sorted(set(kinds) - set(self.spec.group_sizes))
        if extra:
            raise LmcError(f"symmetry spec: kinds name {extra[0]!r}, which is not a group")
        object.__setattr__(self, "roles", roles)
        object.__setattr__(self, "kinds", dict(sorted(kinds.items())))

    @classmethod
    def from_model(
        cls,
        model: nn.Module,
        example_input: Any,
        *,
        tracer: str = "auto",
        spec: PermutationSpec | None = None,
    ) -> SymmetrySpec:
        """Derive the spec (by tracing, unless ``spec`` is given), roles and kinds of
        ``model`` (see :func:`symmetry_spec`)."""
        return symmetry_spec(model, example_input, tracer=tracer, spec=spec)

    def role(self, name: str, axis: int, segment: int) -> str | None:
        """The role of one segment of ``spec[name][axis]``."""
        return self.roles[(name, axis)][segment]

    @property
    def heads(self) -> dict[str, tuple[str, int]]:
        return self.spec.heads

    @property
    def group_sizes(self) -> dict[str, int]:
        return self.spec.group_sizes

    def summary(self) -> str:
        """The spec's table with each group's admissible kind and its members' roles."""
        lines = [f"SymmetrySpec over {self.spec!r}"]
        for group, members in self.spec.groups.items():
            tags = []
            for name, axis in members:
                entry = self.spec[name][axis]
                roles = {
                    self.roles[(name, axis)][k] for k, s in enumerate(entry) if s.perm == group
                }
                tags.append(f"{name}[{axis}]:{'/'.join(sorted(r for r in roles if r))}")
            lines.append(f"  {group} ({self.kinds[group]}): {', '.join(tags)}")
        return "\n".join(lines)


# ---- derivation -------------------------------------------------------------------------------
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


def stream_group(model: nn.Module, spec: PermutationSpec) -> str | None:
    """The group of a supported pre-LN transformer's residual stream (every writer's feature
    axis in one group, see :func:`lmc.perm.canonical.stream_layout`); ``None`` otherwise."""
    from .canonical import stream_layout

    try:
        layout = stream_layout(model)
    except LmcError:
        return None
    found: set[str | None] = set()
    for name, axis in layout.writers:
        entry = spec[name][axis] if name in spec else None
        if entry is None or len(entry) != 1:
            return None
        found.add(entry[0].perm)
    return found.pop() if len(found) == 1 else None


def derive_kinds(
    model: nn.Module, spec: PermutationSpec, roles: Mapping[RoleKey, tuple[str | None, ...]]
) -> dict[str, str]:
    """The most general admissible kind of every group (see the module docstring)."""

    def member_roles(group: str) -> set[str | None]:
        return {
            roles[(name, axis)][k]
            for name, axis in spec.groups.get(group, [])
            for k, seg in enumerate(spec[name][axis])
            if seg.perm == group
        }

    kinds = {group: "permutation" for group in spec.group_sizes}
    for group in spec.heads:
        if member_roles(group) == {"out", "in"}:
            kinds[group] = "invertible"
    stream = stream_group(model, spec)
    if stream is not None and "norm" not in member_roles(stream) and stream not in spec.heads:
        kinds[stream] = "orthogonal"
    return kinds


def symmetry_spec(
    model: nn.Module,
    example_input: Any,
    *,
    tracer: str = "auto",
    spec: PermutationSpec | None = None,
) -> SymmetrySpec:
    """The :class:`SymmetrySpec` of ``model``: its traced permutation spec (or ``spec``), the
    roles of every permuted axis and the admissible kind of every group.

    Canonicalise a pre-LN transformer first (:func:`lmc.perm.canonical.canonicalize`) for its
    stream to admit orthogonal maps; on the original model the stream passes through
    LayerNorms and admits permutations only.
    """
    from .trace import trace_model

    trace = trace_model(model, example_input, tracer=tracer)
    spec = trace.spec if spec is None else spec
    roles = derive_roles(model, spec, trace)
    return SymmetrySpec(spec, roles, derive_kinds(model, spec, roles))


__all__ = [
    "KINDS",
    "SymmetrySpec",
    "derive_kinds",
    "derive_roles",
    "layer_role",
    "stream_group",
    "symmetry_spec",
]
