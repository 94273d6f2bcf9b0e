"""Maps within attention heads where the permutation spec keeps the head dims in place.

The tracer leaves the dims within heads in place where a permutation of them would change the
function (:mod:`lmc.perm.symmetries.trace`): q/k under rotary embeddings (a permutation commutes
with RoPE only if it maps each frequency plane to itself), and, with grouped-query attention, the
q/k and v/o dims of a key/value head that its query heads read. Such a spec segment belongs to
the head group (``Segment(head group, heads, repeat = tiles · d)``: each head's ``d`` dims, once
per query head that reads it). Larger groups than permutations still act there:

- q/k under RoPE: per head, per frequency plane (dims ``p`` and ``p + d/2``, the ``rotate_half``
  convention), one rotation and scaling on q and its inverse transpose on k
  (:class:`lmc.perm.symmetries.transforms.RopePlanes`, kind ``rope``; Tran et al., ICML 2026);
  under interleaved RoPE (GPT-J's and CodeGen's ``rotate_every_two``, Cohere's and Helium's
  ``rotate_half``: planes of dims ``2p`` and ``2p + 1``) the same per plane
  (:class:`lmc.perm.symmetries.transforms.InterleavedRopePlanes`, kind ``rope_interleaved``),
  tried only where the half-split planes fail the check;
- q/k without RoPE and v/o, with grouped-query or multi-query attention: any invertible map
  per key/value head, shared by the query heads that read it (kind ``invertible``).

With multi-query attention (one key/value head read by every query head: Falcon's default,
GPTBigCode's, a Llama-style model with one key/value head) the key/value head is a head group of
one unit (it permutes nothing; :mod:`lmc.perm.symmetries.trace.result` keeps it for this): q's
rows and the output projection's columns read it in ``heads`` tiles, so each of its maps (q/k:
``rope`` or ``rope_interleaved`` under rotary embeddings, else ``invertible``; v/o:
``invertible``) is one map per layer, shared by every query head.

A norm of q and k per head (Qwen3's ``q_norm`` / ``k_norm``: an RMSNorm with a gain over each
head's dims, before RoPE) keeps the q/k dims within heads in place too (the trace: a reduction
over each head's dims). A q/k map must then commute with the norm as well: a rotation within a
rotary plane does only where the gain's two entries in that plane are equal, and a per-plane
scaling never does (a scaling of all a head's dims alike does, up to the norm's eps: the norm
undoes it), so no q/k candidate passes the check and q/k move with whole heads only; v/o, which
the norms do not touch, keep their maps (grouped-query attention's, or the nested group's). A
head group of one unit in which no map passes is dropped from the symmetry spec
(:func:`lmc.perm.symmetries.symmetry_spec.symmetry_spec`): it would permute nothing.

Where one fused projection interleaves its pieces per head (GPT-NeoX's ``query_key_value``:
each head's rows are its q, k and v dims in a row, cut apart by ``chunk`` after the view into
heads), the trace keeps each head's ``3 d`` rows whole; the head dim ``d`` is then the one the
head group's other members read (the output projection's columns per head), and each head's
block is cut into windows of ``d`` (:class:`WithinMember` ``stride`` and ``offset``), each a side.
Windows that no group claims (q/k under partial rotary embeddings) move with the head group's
permutation only.

Each is a *within group* (:class:`WithinGroup`) of the symmetry spec, named
``<head group>:qk`` or ``<head group>:vo``, nested in its head group (its maps move heads as
the head group's permutation does). The trace proposes them: the collapsed segments of one head
group, cut into *sides* (a layer, and within a fused layer the position of the segment); a side
of layer outputs (role ``out``) paired with a side of layer inputs (``in``: the output
projection) is a v/o candidate, two sides of layer outputs a q/k candidate. Each candidate is
checked numerically on the example input, on a float64 copy with every parameter redrawn: a
random element of the candidate group applied to that layer's tensors alone must keep the
output to 1e-7 relative. Only candidates that pass become groups, so a within group never
changes the function.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.func import functional_call

from lmc.config import LmcError

from .example_inputs import output_tensor
from .permutation_spec import PermutationSpec
from .residual_stream import _as_double, _randomised, _tied
from .transforms import PLANE_CLASSES, Invertible, Transform, act_tiled

#: relative change of the output below which a candidate map is taken to keep the function
CHECK_TOL = 1e-7


@dataclass(frozen=True)
class WithinMember:
    """One spec segment a within group acts on: ``spec[name][axis][segment]`` (a segment of
    the head group), its role in the group (``out``: mapped by ``M``; ``in``: by ``M⁻ᵀ``) and
    ``tiles``, how many times each head's dims appear in a row there. ``stride`` and
    ``offset``: where one fused projection interleaves several pieces per head (GPT-NeoX's
    ``query_key_value``: each head's rows are its q, k and v dims in a row), the segment holds
    ``stride`` entries per head and the member is the ``tiles · d`` of them from ``offset`` on
    (``stride`` 0: the whole segment)."""

    name: str
    axis: int
    segment: int
    role: str
    tiles: int
    stride: int = 0
    offset: int = 0


def take_window(
    x: torch.Tensor, axis: int, heads: int, member: WithinMember, length: int
) -> torch.Tensor:
    """The member's entries of ``x`` along ``axis`` (a segment of ``heads`` heads), in head
    order: ``heads × length`` of them (``length`` = ``tiles · d``); the whole of ``x`` where
    the member is the whole segment (differentiable)."""
    if not member.stride:
        return x
    moved = x.movedim(axis, -1)
    lead = moved.shape[:-1]
    blocks = moved.reshape(*lead, heads, member.stride)
    window = blocks[..., member.offset : member.offset + length]
    return window.reshape(*lead, heads * length).movedim(-1, axis)


def put_window(
    x: torch.Tensor, axis: int, heads: int, member: WithinMember, new: torch.Tensor
) -> torch.Tensor:
    """``x`` with the member's entries (see :func:`take_window`) replaced by ``new``
    (differentiable)."""
    if not member.stride:
        return new
    moved = x.movedim(axis, -1)
    lead = moved.shape[:-1]
    blocks = moved.reshape(*lead, heads, member.stride)
    length = new.shape[axis] // heads
    piece = new.movedim(axis, -1).reshape(*lead, heads, length)
    end = member.offset + length
    out = torch.cat([blocks[..., : member.offset], piece, blocks[..., end:]], dim=-1)
    return out.reshape(*lead, heads * member.stride).movedim(-1, axis)


@dataclass(frozen=True)
class WithinGroup:
    """A group of maps within heads that the permutation spec keeps in place (module
    docstring): ``head`` (its head group), ``heads`` (that group's size), ``dim`` (dims per
    head), ``kind`` (``rope``, ``rope_interleaved`` or ``invertible``) and its ``members``."""

    head: str
    heads: int
    dim: int
    kind: str
    members: tuple[WithinMember, ...]

    @property
    def size(self) -> int:
        return self.heads * self.dim


def _sides(
    spec: PermutationSpec,
    roles: Mapping[tuple[str, int], tuple[str | None, ...]],
    head: str,
    d: int,
    windows: bool = False,
) -> dict[tuple[str, int, int], list[WithinMember]]:
    """The head group's segments with whole dims per head, by side (owning layer, position,
    offset within each head). ``windows``: a segment with ``k · d`` entries per head is cut into
    ``k`` windows of ``d`` (the pieces of a fused projection interleaved per head), each its own
    side, instead of ``k`` tiles of one side."""
    sides: dict[tuple[str, int, int], list[WithinMember]] = {}
    for name, axis in spec.groups.get(head, []):
        occurrence = 0
        for k, seg in enumerate(spec[name][axis]):
            if seg.perm != head:
                continue
            if seg.repeat >= d and seg.repeat % d == 0:
                role = roles[(name, axis)][k] or "out"
                owner = name.rpartition(".")[0]
                if windows and seg.repeat > d:
                    for offset in range(0, seg.repeat, d):
                        sides.setdefault((owner, occurrence, offset), []).append(
                            WithinMember(name, axis, k, role, 1, seg.repeat, offset)
                        )
                else:
                    sides.setdefault((owner, occurrence, 0), []).append(
                        WithinMember(name, axis, k, role, seg.repeat // d)
                    )
            occurrence += 1
    return sides


def _output(
    model: nn.Module,
    state: Mapping[str, torch.Tensor],
    inputs: tuple,
    tied: tuple[tuple[str, ...], ...],
) -> torch.Tensor:
    """The model's output with ``state``, each tied tensor given once, under its first name
    (``functional_call`` ties its other names to it, as the model does)."""
    second = {name for group in tied for name in group[1:]}
    given = {k: v for k, v in state.items() if k not in second}
    out = output_tensor(functional_call(model, given, inputs))
    if out is None:
        raise LmcError("the model's output holds no floating tensor to compare")
    return out


def _ties_kept(state: Mapping[str, torch.Tensor], tied: tuple[tuple[str, ...], ...]) -> bool:
    """Whether every tied tensor has one value under all its names in ``state`` (a map that
    changes a tied tensor must change it under every name: it is one tensor)."""
    for group in tied:
        first = state[group[0]]
        if not all(torch.equal(state[name], first) for name in group[1:]):
            return False
    return True


def _apply(
    spec: PermutationSpec,
    state: Mapping[str, torch.Tensor],
    members: list[WithinMember],
    transform: Transform,
    heads: int,
) -> dict[str, torch.Tensor]:
    """``state`` with ``transform`` applied to the members' segments (by their roles)."""
    out = dict(state)
    d = transform.size // heads
    for m in members:
        x = out[m.name]
        offset = sum(s.extent for s in spec[m.name][m.axis][: m.segment])
        seg = spec[m.name][m.axis][m.segment]
        whole = x.narrow(m.axis, offset, seg.extent)
        window = take_window(whole, m.axis, heads, m, m.tiles * d)
        moved = act_tiled(transform, window, m.axis, m.role, m.tiles, heads)
        piece = put_window(whole, m.axis, heads, m, moved)
        out[m.name] = torch.cat(
            [x.narrow(m.axis, 0, offset), piece,
             x.narrow(m.axis, offset + seg.extent, x.shape[m.axis] - offset - seg.extent)],
            dim=m.axis,
        )  # fmt: skip
    return out


def find_within_groups(
    model: nn.Module,
    example_input: Any,
    spec: PermutationSpec,
    roles: Mapping[tuple[str, int], tuple[str | None, ...]],
    collapsed: Mapping[tuple[str, int, int], tuple[int, int]],
) -> dict[str, WithinGroup]:
    """The within groups of ``model`` (module docstring); ``collapsed``: the trace's record of
    the segments whose dims within heads it kept in place (:class:`lmc.perm.TraceResult`)."""
    dims: dict[str, set[int]] = {}
    for (name, axis, k), (_, d) in collapsed.items():
        entry = spec[name][axis] if name in spec else None
        if entry is not None and k < len(entry) and entry[k].perm is not None:
            dims.setdefault(entry[k].perm, set()).add(d)
    heads_of = {g: next(iter(ds)) for g, ds in dims.items() if len(ds) == 1 and next(iter(ds)) > 1}
    if not heads_of:
        return {}
    copy_ = _randomised(model)
    state = {k: v.detach() for k, v in copy_.state_dict().items()}
    tied = _tied(copy_, set(state))  # a head tied to the embedding: one tensor, two names
    inputs = _as_double(example_input if isinstance(example_input, tuple) else (example_input,))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = _output(copy_, state, inputs, tied)
        scale = float(base.norm()) or 1.0
        gen = torch.Generator().manual_seed(0)
        found: dict[str, WithinGroup] = {}

        def keeps(members: list[WithinMember], kind: str, n_heads: int, d: int) -> bool:
            cls = PLANE_CLASSES.get(kind, Invertible)
            t = cls.random(n_heads * d, gen, heads=n_heads, head=torch.arange(n_heads))
            moved = _apply(spec, state, members, t, n_heads)
            if not _ties_kept(moved, tied):
                return False
            try:
                y = _output(copy_, moved, inputs, tied)
            except Exception:  # noqa: BLE001 - a candidate the model cannot run is no symmetry
                return False
            return float((y - base).norm()) <= CHECK_TOL * scale

        def search(head: str, d: int, sides: dict[Any, list[WithinMember]]) -> None:
            n_heads = spec.group_sizes[head]
            outs = [k for k, ms in sides.items() if {m.role for m in ms} == {"out"}]
            ins = [k for k, ms in sides.items() if {m.role for m in ms} == {"in"}]
            for o in ins:  # v/o: a side of outputs read back by the output projection
                for s in outs:
                    members = sides[s] + sides[o]
                    if keeps(members, "invertible", n_heads, d):
                        found[f"{head}:vo"] = WithinGroup(head, n_heads, d, "invertible",
                                                          tuple(members))  # fmt: skip
                        outs.remove(s)
                        break
                if f"{head}:vo" in found:
                    break
            for i, a in enumerate(outs):  # q/k: two sides of outputs, the second contravariant
                done = False
                for b in outs[i + 1 :]:
                    members = sides[a] + [dataclasses.replace(m, role="in") for m in sides[b]]
                    for kind in ("invertible", *PLANE_CLASSES):  # rope, then rope_interleaved
                        if kind in PLANE_CLASSES and d % 2:
                            continue
                        if keeps(members, kind, n_heads, d):
                            found[f"{head}:qk"] = WithinGroup(head, n_heads, d, kind,
                                                              tuple(members))  # fmt: skip
                            done = True
                            break
                    if done:
                        break
                if done:
                    break

        for head, d in sorted(heads_of.items()):
            search(head, d, _sides(spec, roles, head, d))
            if any(w.head == head for w in found.values()):
                continue
            # one fused projection interleaving its pieces per head (GPT-NeoX): the head dim
            # is the one its other members read (the output projection's columns per head)
            repeats = {
                seg.repeat
                for name, axis in spec.groups.get(head, [])
                for seg in spec[name][axis]
                if seg.perm == head
            }
            small = math.gcd(*repeats)
            if 1 < small < d and d % small == 0:
                search(head, small, _sides(spec, roles, head, small, windows=True))
    return found


def member_index(
    within: Mapping[str, WithinGroup],
) -> dict[tuple[str, int, int], tuple[tuple[str, WithinMember], ...]]:
    """``(name, axis, segment) -> ((within group, member), ...)`` for every segment some
    member acts on (several where a fused projection interleaves pieces per head)."""
    out: dict[tuple[str, int, int], tuple[tuple[str, WithinMember], ...]] = {}
    for g, w in within.items():
        for m in w.members:
            key = (m.name, m.axis, m.segment)
            out[key] = (*out.get(key, ()), (g, m))
    return out


def covers(members: tuple[tuple[str, WithinMember], ...], within: Mapping[str, WithinGroup],
           stride: int) -> bool:  # fmt: skip
    """Whether the members' windows cover every entry of their segment's heads (``stride``
    entries per head); else the rest moves with the head group's permutation only."""
    covered = set()
    for g, m in members:
        if not m.stride:
            return True
        covered |= set(range(m.offset, m.offset + m.tiles * within[g].dim))
    return covered >= set(range(stride))


__all__ = [
    "CHECK_TOL",
    "WithinGroup",
    "WithinMember",
    "covers",
    "find_within_groups",
    "member_index",
    "put_window",
    "take_window",
]
