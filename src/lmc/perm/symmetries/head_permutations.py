"""Head-structured permutations: a head permutation with a permutation inside each head.

An attention layer with ``H`` heads of ``d`` dims has, besides the residual stream, a *head
group* (``H`` units: heads move as blocks) and *nested groups* of ``H * d`` units: one shared by
q and k, one shared by v and the output projection's input. A nested group's permutation is an
ordinary index tensor over its ``H * d`` flat units (so ``apply_permutation`` is unchanged), but
it must be *block-structured* by its head group's permutation ``h``::

    p[a * d + i] = h[a] * d + s_a[i]        (0 <= a < H, 0 <= i < d)

with ``s_a`` a permutation of ``0..d-1`` for each head: new head ``a`` is old head ``h[a]``,
with its dims reordered by ``s_a``. Flat unit ``a * d + i`` is dim ``i`` of head ``a`` (the order
of ``x.view(..., H, d)``).

Matching a head group (:func:`nested_assignment`): for every pair (head ``a`` of A, head ``b``
of B) and every nested group, the best within-head assignment is one linear assignment on the
``d x d`` block ``S[a*d:(a+1)*d, b*d:(b+1)*d]`` of that group's similarity; its value, summed
over the nested groups (plus the head group's own similarity, where some tensor is indexed by
whole heads), scores the pair; one assignment on that ``H x H`` score picks the heads, and the
within-head permutations are those of the chosen pairs. Given everything else, this is the
exact maximiser of the similarity over head-structured permutations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from lmc.config import LmcError

from ..solvers.assignment import linear_assignment


def compose_heads(head: torch.Tensor, within: torch.Tensor) -> torch.Tensor:
    """The flat permutation ``p[a * d + i] = head[a] * d + within[a, i]`` (``within``: (H, d))."""
    d = within.shape[1]
    return (head.long()[:, None] * d + within.long()).reshape(-1)


def split_heads(p: torch.Tensor, n_heads: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(head, within)`` with ``p == compose_heads(head, within)``; ``None`` when ``p`` is not
    block-structured (some head's dims come from two old heads, or are not a permutation)."""
    n = p.numel()
    if n_heads < 1 or n % n_heads:
        return None
    d = n // n_heads
    blocks = p.detach().long().cpu().reshape(n_heads, d)
    head = blocks // d
    if not torch.equal(head, head[:, :1].expand_as(head)):
        return None
    within = blocks % d
    if not torch.equal(torch.sort(within, dim=1).values, torch.arange(d).expand_as(within)):
        return None
    return head[:, 0].clone(), within


def random_nested(head: torch.Tensor, d: int, gen: torch.Generator) -> torch.Tensor:
    """A uniformly random block-structured permutation over ``head`` (one ``randperm`` per head)."""
    within = torch.stack([torch.randperm(d, generator=gen) for _ in range(head.numel())])
    return compose_heads(head, within)


def check_nested(name: str, p: torch.Tensor, head_name: str, head: torch.Tensor) -> None:
    """``LmcError`` unless ``p`` is block-structured by the head permutation ``head``."""
    parts = split_heads(p, head.numel())
    if parts is None or not torch.equal(parts[0], head.detach().long().cpu()):
        raise LmcError(
            f"permutation {name!r} must move whole heads as {head_name!r} does (and permute "
            "the dims within each head): it is not block-structured by that head permutation"
        )


def nested_assignment(
    head_similarity: torch.Tensor | None,
    nested: Sequence[torch.Tensor],
    n_heads: int,
) -> tuple[torch.Tensor, list[torch.Tensor], float]:
    """Maximise ``Σ_a head_sim[a, h[a]] + Σ_G Σ_j S_G[j, p_G[j]]`` over head-structured perms.

    ``head_similarity``: ``(H, H)`` or ``None``; ``nested``: one ``(H*d_G, H*d_G)`` similarity
    per nested group (rows: A's flat units, columns: B's). Returns the head permutation, the
    flat permutation of each nested group and the value reached (see the module docstring).
    """
    score = torch.zeros(n_heads, n_heads, dtype=torch.float64)
    if head_similarity is not None:
        score += head_similarity.detach().to("cpu", torch.float64)
    pair_perms: list[torch.Tensor] = []  # per group: (H, H, d) best within-head assignment
    for s in nested:
        s = s.detach().to("cpu", torch.float64)
        d = s.shape[0] // n_heads
        blocks = s.reshape(n_heads, d, n_heads, d).permute(0, 2, 1, 3)  # (a, b, i, j)
        best = torch.empty(n_heads, n_heads, d, dtype=torch.long)
        rows = torch.arange(d)
        for a in range(n_heads):
            for b in range(n_heads):
                sigma = linear_assignment(blocks[a, b])
                best[a, b] = sigma
                score[a, b] += blocks[a, b][rows, sigma].sum()
        pair_perms.append(best)
    head = linear_assignment(score)
    heads = torch.arange(n_heads)
    flats = [compose_heads(head, best[heads, head]) for best in pair_perms]
    return head, flats, float(score[heads, head].sum())


def head_value(
    head_similarity: torch.Tensor | None,
    nested: Sequence[torch.Tensor],
    head: torch.Tensor,
    flats: Sequence[torch.Tensor],
) -> float:
    """The value of :func:`nested_assignment`'s objective at given permutations."""
    total = 0.0
    if head_similarity is not None:
        rows = torch.arange(head.numel(), device=head_similarity.device)
        total += float(head_similarity[rows, head.to(head_similarity.device)].sum())
    for s, p in zip(nested, flats):
        rows = torch.arange(p.numel(), device=s.device)
        total += float(s[rows, p.to(s.device)].sum())
    return total


def nested_of(heads: Mapping[str, tuple[str, int]]) -> dict[str, list[str]]:
    """Head group -> its nested groups (sorted), from a spec's ``nested -> (head, H)`` map."""
    out: dict[str, list[str]] = {}
    for g, (h, _) in sorted(heads.items()):
        out.setdefault(h, []).append(g)
    return out
