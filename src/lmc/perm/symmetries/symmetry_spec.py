"""Which symmetry each group of a model has, and how each tensor axis transforms under it.

A :class:`SymmetrySpec` is a :class:`~lmc.perm.PermutationSpec` (which group indexes which
axis of which tensor) plus two things a permutation never needed:

- ``roles``: for every permuted axis, one role per segment of its entry --
  ``"out"`` (covariant: the axis holds coordinates of the group's units, ``x -> M x``: a
  layer's output rows and its bias, an embedding's features, a class token, the q side of
  q/k), ``"in"`` (contravariant: the axis reads the units, ``x -> M⁻ᵀ x``: a layer's input
  columns, the k side of q/k) or ``"norm"`` (an elementwise gain or bias of a norm: only a
  permutation may act). See :mod:`lmc.perm.symmetries.transforms`.
- ``kinds``: for every group, the most general transform kind under which the model's
  function is unchanged: ``"invertible"`` for the dims within attention heads (q/k, v/o),
  ``"orthogonal"`` for the residual stream of a canonical pre-LN transformer
  (:mod:`lmc.perm.symmetries.canonical_form`), ``"permutation"`` for everything else (MLP hidden
  units, heads as wholes, any stream that still passes through a LayerNorm).
- ``within``: groups of maps within attention heads where the permutation spec keeps the head
  dims in place (q/k under rotary embeddings: kind ``rope``, or ``rope_interleaved`` for
  GPT-J's layout; q/k and v/o of grouped-query or multi-query attention: ``invertible``),
  each nested in its head group
  (:mod:`lmc.perm.symmetries.within_heads`). They are optional in an :class:`~lmc.perm.Alignment`
  (absent: the identity within heads).

Roles are derived per tensor from the layer that owns it: ``nn.Linear`` / ``nn.Conv*``
weights are ``(out, in, ...)``, transposed convolutions and Hugging Face's ``Conv1D``
``(in, out)``, an ``nn.Embedding`` weight's feature axis is ``out``, biases are ``out``, norm
parameters ``norm`` (as are the gain and bias of every norm the stream layout recognises,
whatever its class); a tensor no known layer owns takes the tracer's record of how it was
used (an output or an input axis of a weight layer), else ``out`` (a vector added into the
stream: class tokens, position embeddings). A nested q/k group whose members are all ``out``
(q and k are both layer outputs) is split into its two sides (by layer and by position within
a fused qkv layer); the second side is ``in``, since ``qᵀk = (A q)ᵀ (A⁻ᵀ k)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from lmc.config import LmcError

from .axis_roles import NORM_TYPES, RoleKey, derive_roles, layer_role
from .permutation_spec import PermutationSpec
from .residual_stream import traced_layout
from .trace import trace_model
from .transforms import KINDS, ROLES, kind_rank
from .within_heads import WithinGroup, find_within_groups


@dataclass(frozen=True, eq=False)
class SymmetrySpec:
    """A permutation spec with axis roles and the admissible kind of each group (see the
    module docstring). ``roles[(name, axis)]`` holds one role (or ``None`` for a fixed
    segment) per segment of ``spec[name][axis]``; every permuted axis must have one."""

    spec: PermutationSpec
    roles: Mapping[RoleKey, tuple[str | None, ...]]
    kinds: Mapping[str, str]
    within: Mapping[str, WithinGroup] = field(default_factory=dict)

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
        within = dict(self.within)
        for group in self.spec.group_sizes:
            kinds.setdefault(group, "permutation")
            kind_rank(kinds[group])
        for name, w in within.items():
            if name in self.spec.group_sizes or w.head not in self.spec.group_sizes:
                raise LmcError(f"symmetry spec: within group {name!r} clashes or has no head group")
            kinds[name] = w.kind
        extra = sorted(set(kinds) - set(self.spec.group_sizes) - set(within))
        if extra:
            raise LmcError(f"symmetry spec: kinds name {extra[0]!r}, which is not a group")
        object.__setattr__(self, "roles", roles)
        object.__setattr__(self, "kinds", dict(sorted(kinds.items())))
        object.__setattr__(self, "within", dict(sorted(within.items())))

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
        for name, w in self.within.items():
            tags = [f"{m.name}[{m.axis}]:{m.role}" for m in w.members]
            lines.append(f"  {name} ({w.kind}, within {w.head}): {', '.join(tags)}")
        return "\n".join(lines)


def stream_group(
    model: nn.Module, spec: PermutationSpec, example_input: Any = None, trace: Any = None
) -> str | None:
    """The group of a pre-norm transformer's residual stream, read off its traced graph
    (:func:`lmc.perm.symmetries.residual_stream.traced_layout`); ``None`` when the model has none
    lmc can fold."""
    layout = _layout(model, example_input, trace)
    return None if layout is None or layout.group not in spec.group_sizes else layout.group


def _layout(model: nn.Module, example_input: Any, trace: Any):
    try:
        return traced_layout(model, example_input, trace)
    except LmcError:
        return None


def derive_kinds(
    model: nn.Module,
    spec: PermutationSpec,
    roles: Mapping[RoleKey, tuple[str | None, ...]],
    layout: Any = "trace",
) -> dict[str, str]:
    """The most general admissible kind of every group (see the module docstring);
    ``layout``: the model's :class:`~lmc.perm.symmetries.residual_stream.StreamLayout` (``None``: no
    stream lmc can fold; by default it is traced on an example input made from the model)."""

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
    if isinstance(layout, str):
        layout = _layout(model, None, None)
    stream = None if layout is None else layout.group
    if (
        stream in spec.group_sizes
        and layout.canonical
        and "norm" not in member_roles(stream)
        and stream not in spec.heads
    ):
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
    roles of every permuted axis, the admissible kind of every group, and the groups of maps
    within heads the spec keeps in place (:mod:`lmc.perm.symmetries.within_heads`). A traced
    head group of one unit (multi-query attention's key/value head) is kept only where a within
    group nests in it: otherwise it permutes nothing and is left out (its axes fixed).

    Canonicalise a pre-norm transformer first
    (:func:`lmc.perm.symmetries.canonical_form.canonicalize`) for its stream to admit orthogonal
    maps; on the original model the stream passes through norms with parameters (or that subtract
    the mean) and admits permutations only.
    """
    trace = trace_model(model, example_input, tracer=tracer)
    traced = spec is None
    spec = trace.spec if spec is None else spec
    roles = derive_roles(model, spec, trace)
    layout = _layout(model, example_input, trace)
    if layout is not None:  # a recognised norm's gain and bias are elementwise, whatever owns them
        elementwise = [n for site in layout.norms for n in (site.gain, site.bias)]
        elementwise += [n for e in layout.embedding_norms for n in (e.gain, e.bias)]
        elementwise += [scale.param for scale in layout.scales]
        for name in elementwise:
            if name is not None:
                for axis in range(len(spec[name]) if name in spec else 0):
                    if (name, axis) in roles:
                        roles[(name, axis)] = tuple(
                            None if r is None else "norm" for r in roles[(name, axis)]
                        )
    within = find_within_groups(model, example_input, spec, roles, trace.collapsed)
    if traced:
        spec, roles, within = _without_idle_heads(spec, roles, within)
    return SymmetrySpec(spec, roles, derive_kinds(model, spec, roles, layout), within)


def _without_idle_heads(
    spec: PermutationSpec,
    roles: dict[RoleKey, tuple[str | None, ...]],
    within: dict[str, WithinGroup],
) -> tuple[PermutationSpec, dict[RoleKey, tuple[str | None, ...]], dict[str, WithinGroup]]:
    """The spec without the groups of one unit that carry nothing: the trace keeps a head
    group of one unit (multi-query attention's key/value head) for the maps within it; where
    no within group was found in it and no group nests in it, it permutes nothing and is
    fixed (:meth:`PermutationSpec.fixing`), with the roles and within members renumbered: the
    segments still permuted keep their order."""
    nesting = {head for head, _ in spec.heads.values()}
    carrying = {w.head for w in within.values()}
    idle = {g for g, n in spec.group_sizes.items() if n == 1 and g not in nesting | carrying}
    if not idle:
        return spec, roles, within
    fixed = spec.fixing(idle)
    new_roles: dict[RoleKey, tuple[str | None, ...]] = {}
    index: dict[tuple[str, int, int], int] = {}  # (name, axis, old segment) -> new segment
    for name, entries in fixed.axes.items():
        for axis, entry in enumerate(entries):
            if entry is None:
                continue
            old = spec[name][axis]
            kept_old = [k for k, s in enumerate(old) if s.perm is not None and s.perm not in idle]
            kept_new = [k for k, s in enumerate(entry) if s.perm is not None]
            moved = dict(zip(kept_old, kept_new))
            index.update({(name, axis, k): j for k, j in moved.items()})
            new = [None] * len(entry)
            for k, j in moved.items():
                new[j] = roles[(name, axis)][k]
            new_roles[(name, axis)] = tuple(new)
    new_within = {
        g: dataclasses.replace(w, members=tuple(
            dataclasses.replace(m, segment=index[(m.name, m.axis, m.segment)])
            for m in w.members))
        for g, w in within.items()
    }  # fmt: skip
    return fixed, new_roles, new_within


def default_orthogonal_groups(spec: SymmetrySpec) -> list[str]:
    """The groups not nested in heads that admit orthogonal maps (the residual stream); the
    spec's within groups (maps within heads, :mod:`lmc.perm.symmetries.within_heads`) are not."""
    return [
        g
        for g, kind in spec.kinds.items()
        if kind_rank(kind) >= kind_rank("orthogonal")
        and g not in spec.heads
        and g not in spec.within
    ]


__all__ = [
    "KINDS",
    "NORM_TYPES",
    "RoleKey",
    "WithinGroup",
    "SymmetrySpec",
    "default_orthogonal_groups",
    "derive_kinds",
    "derive_roles",
    "layer_role",
    "stream_group",
    "symmetry_spec",
]
