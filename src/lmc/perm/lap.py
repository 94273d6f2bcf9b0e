"""The linear assignment solvers that every matching method calls.

Two exact solvers of ``max_p Σ_i S[i, p[i]]`` over permutations ``p`` of a square matrix:

- ``scipy``: SciPy's ``linear_sum_assignment`` (a shortest-augmenting-path Jonker–Volgenant
  variant) on ``S`` reduced by its row and then column maxima (the same optimum);
- ``sparse``: a certified candidate-set solver. Each row keeps its ``k`` best columns under the
  column prices ``v`` (warm-started from the previous solve of the same matrix, which late
  weight-matching passes barely change), plus the edges of the current permutation, so a perfect
  matching always exists; SciPy's ``linear_sum_assignment`` solves that problem with every
  other edge forbidden (SciPy's sparse LAPJVsp, ``min_weight_full_bipartite_matching``, was
  used first but loops forever on some float inputs: an 87×87 candidate graph hung it under
  SciPy 1.16.3 and 1.17.1), Bellman–Ford on its edges (SciPy's) gives prices ``v``
  with every candidate edge's reduced value ``S[i, j] − v[j]`` at most its row's assigned one,
  and a dense check proves the answer optimal on the full matrix: when no row has an entry with
  ``S[i, j] − v[j] > S[i, p[i]] − v[p[i]] + eps`` then ``Σ S[i, q[i]] ≤ Σ S[i, p[i]] + n·eps``
  for every permutation ``q`` (``eps = 1e-11 · max|S|``). Rows that fail add their best columns
  to the candidates and the sparse problem is solved again; after ``_MAX_ROUNDS`` rounds, or if
  Bellman–Ford does not settle, SciPy's dense solver answers. So the answer is always the exact
  optimum (to ``n · eps``), whatever the matrix.

The dense check runs in float32 with a margin that covers its rounding; rows within the margin
are checked again in float64.

Measured with SciPy's dense solver inside the candidate rounds (``benchmarks/weight_matching.py
--profile``, one run on a shared 2-core CPU, 2026-12-04): on weight matching of digits MLPs the
sparse solver's assignments took 0.8x SciPy's time at width 512 (0.38 s against 0.46 s), 9.0x
at 1024 (14.1 s against 1.6 s) and 11.6x at 2048 (56.3 s against 4.8 s): the candidate problem
is solved densely with forbidden edges, so it costs a dense solve per round plus the
certificate. ``scipy`` is the default everywhere; ``sparse`` is an exact second solver (tests
cross-check the two), not a faster one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import NegativeCycleError, bellman_ford

from lmc.config import LmcError

SOLVERS = ("scipy", "sparse")

_MAX_ROUNDS = 12  # sparse rounds before the dense fallback
_EPS = 1e-11  # certificate tolerance, relative to max|S|
_MARGIN32 = 1e-6  # float32 screening margin, relative to max|S| + max|v| (rounding ~1e-7)


@dataclass(frozen=True)
class Assignment:
    """One solved assignment: ``perm`` (int64, on ``S``'s device as given) and, when the
    sparse solver certified it, the column ``prices`` (float64) that prove it optimal and
    warm-start the next solve (``None`` otherwise); ``rounds``: sparse rounds (0: dense)."""

    perm: torch.Tensor
    prices: torch.Tensor | None
    rounds: int


def _check_square(s: torch.Tensor) -> None:
    if s.dim() != 2 or s.shape[0] != s.shape[1]:
        raise LmcError(f"similarity must be a square matrix, got shape {list(s.shape)}")


def _scipy(s: torch.Tensor) -> torch.Tensor:
    x = s.detach().to("cpu", torch.float64)
    x = x - x.max(dim=1, keepdim=True).values
    x = x - x.max(dim=0, keepdim=True).values
    rows, cols = linear_sum_assignment(x.numpy(), maximize=True)
    out = torch.empty(s.shape[0], dtype=torch.long)
    out[torch.from_numpy(rows).long()] = torch.from_numpy(cols).long()
    return out


def _prices(
    s: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, perm: torch.Tensor
) -> torch.Tensor | None:
    """Column prices with ``v[j] ≥ v[p[i]] + S[i, j] − S[i, p[i]]`` on every candidate edge:
    longest paths from 0 (SciPy's Bellman–Ford on the negated gains, from a virtual source
    joined to every column); ``None`` on a positive cycle (``perm`` not optimal on the
    candidates, e.g. by rounding)."""
    n = s.shape[0]
    src = perm[rows]
    keep = src != cols
    src, dst = src[keep], cols[keep]
    loss = (s[rows[keep], src] - s[rows[keep], dst]).numpy()
    # the source's edges are explicit zeros, which csgraph reads as edges of weight 0
    graph = csr_matrix(
        (
            np.concatenate([loss, np.zeros(n)]),
            (
                np.concatenate([src.numpy(), np.full(n, n)]),
                np.concatenate([dst.numpy(), np.arange(n)]),
            ),
        ),
        shape=(n + 1, n + 1),
    )
    try:
        dist = bellman_ford(graph, directed=True, indices=n)
    except NegativeCycleError:
        return None
    return -torch.from_numpy(dist[:n]).to(s.dtype)


def _sparse(
    s: torch.Tensor, prices: torch.Tensor | None, start: torch.Tensor | None, k: int
) -> Assignment:
    n = s.shape[0]
    s = s.detach().to("cpu", torch.float64)
    s32 = s.float()
    scale = max(float(s32.abs().max()), 1e-300)
    eps = _EPS * scale
    ar = torch.arange(n)
    k = min(k, n)
    screen = s32 if prices is None else s32 - prices.float()[None, :]
    best = screen.topk(k, dim=1).indices
    base = ar if start is None else start.long().cpu()
    rows = torch.cat([ar.repeat_interleave(k), ar])
    cols = torch.cat([best.reshape(-1), base])
    for rounds in range(1, _MAX_ROUNDS + 1):
        key = torch.unique(rows * n + cols)
        rows, cols = key // n, key % n
        # the candidate problem: every other edge is forbidden (-inf); SciPy's dense solver
        # is used on it because its sparse one (LAPJVsp) can loop forever on float costs
        candidates = np.full((n, n), -np.inf)
        candidates[rows.numpy(), cols.numpy()] = s[rows, cols].numpy()
        r, c = linear_sum_assignment(candidates, maximize=True)
        perm = torch.empty(n, dtype=torch.long)
        perm[torch.from_numpy(r).long()] = torch.from_numpy(c).long()
        v = _prices(s, rows, cols, perm)
        if v is None:
            break
        own = s[ar, perm] - v[perm]
        # float32 screen for rows with a competitor close to their own reduced value
        reduced = s32 - v.float()[None, :]
        reduced[ar, perm] = -torch.inf
        margin = _MARGIN32 * (scale + float(v.abs().max()))
        close = (reduced.max(dim=1).values.double() > own + eps - margin).nonzero().squeeze(1)
        if close.numel() == 0:
            return Assignment(perm, v, rounds)
        exact = s[close] - v[None, :]
        exact[torch.arange(close.numel()), perm[close]] = -torch.inf
        bad = close[exact.max(dim=1).values > own[close] + eps]
        if bad.numel() == 0:
            return Assignment(perm, v, rounds)
        extra = reduced[bad].topk(k, dim=1).indices
        rows = torch.cat([rows, bad.repeat_interleave(k), bad])
        cols = torch.cat([cols, extra.reshape(-1), perm[bad]])
    return Assignment(_scipy(s), None, 0)


def solve_assignment(
    similarity: torch.Tensor,
    *,
    solver: str = "scipy",
    prices: torch.Tensor | None = None,
    start: torch.Tensor | None = None,
    k: int = 16,
    min_size: int = 256,
) -> Assignment:
    """The exact maximiser ``p`` of ``Σ_i similarity[i, p[i]]``, with its certificate.

    ``solver``: ``scipy`` or ``sparse`` (see the module docstring); ``prices`` (n,) and
    ``start`` (a permutation) warm-start the sparse solver (from the last solve of a similar
    matrix); ``k``: candidate columns per row; matrices smaller than ``min_size`` go to SciPy
    whatever ``solver`` says (the sparse rounds' overhead does not pay below it). Non-finite
    entries are the caller's to refuse.
    """
    _check_square(similarity)
    if solver not in SOLVERS:
        raise LmcError(f"solver must be one of {', '.join(SOLVERS)}, got {solver!r}")
    n = similarity.shape[0]
    if n == 0:
        return Assignment(torch.zeros(0, dtype=torch.long), None, 0)
    if solver == "scipy" or n < max(min_size, 2):
        return Assignment(_scipy(similarity), None, 0)
    return _sparse(similarity, prices, start, k)


def linear_assignment(similarity: torch.Tensor, solver: str = "scipy") -> torch.Tensor:
    """The permutation ``p`` maximising ``Σ_i similarity[i, p[i]]`` (an int64 CPU tensor).

    Rows are A's units, columns B's; ``p[i]`` is the unit of B matched to unit ``i`` of A, so
    applying ``p`` to B puts B's units in A's order. Exact with either ``solver`` (see
    :func:`solve_assignment`); non-finite entries are the caller's to refuse.
    """
    return solve_assignment(similarity, solver=solver).perm
