"""The linear assignment solvers that every matching method calls.

Three exact solvers of ``max_p Σ_i S[i, p[i]]`` over permutations ``p`` of a square matrix,
and ``auto``, weight matching's default: ``lapx`` for matrices of ``AUTO_LAPX_MIN`` (32) rows
or more where lapx is installed and passed its check, ``scipy`` otherwise.

- ``scipy``: SciPy's ``linear_sum_assignment`` (a shortest-augmenting-path Jonker–Volgenant
  variant) on ``S`` reduced by its row and then column maxima (the same optimum);
- ``lapx``: lapx's Jonker–Volgenant (``lap.lapjvr``, its Rust solver, in float64; ``lap.lapjv``
  in builds without it; the optional ``lapx`` package, ``pip install 'lmc[fast]'``) on the same
  reduced ``S``, negated into costs and scaled by a
  power of two into [0, 1) (exact). Before anything uses it, :func:`lapx_problem` checks that
  the installed build reaches SciPy's optimum on 32 fixed matrices (ties, tiny, huge and
  negative values); one that does not is never used;
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
  optimum (to ``n · eps``), whatever the matrix. The dense check runs in float32 with a margin
  that covers its rounding; rows within the margin are checked again in float64.

Ties: every solver returns an optimum, and the same one for the same matrix, but where several
permutations tie they may return different ones (lapx and SciPy do on 322 of the 1000 matrices
of ``tests/perm/test_lap_solver.py``, every one of them a matrix with ties). Weight matching
takes a step only when it raises the objective (by more than 1e-12 of it), so a tie with the
current permutation never moves a unit, but a tie between two better ones is broken by the
solver: a result that must give the same numbers on every machine names ``scipy`` or ``lapx``
rather than ``auto`` (whose answer depends on whether lapx is installed); the committed recipes
name ``scipy``.

Speed (measured 2026-12-06 on a quiet 2-core CPU; ``benchmarks/weight_matching.py --solvers
--profile``, log ``docs/results/benchmarks/weight_matching-solvers-2026-12-06.log``): on every
similarity matrix of a weight-matching run, lapx's ``lapjvr`` in float64 was 2.6–4.2× as fast as
SciPy on the MLPs' groups of 512 to 4096 units and 1.6–2.0× on ResNet-20's of 16 to 256 units;
lapx's older ``lapjv`` was 1.5–1.6× as fast at 512–2048 units, 0.81× at 4096 and 0.62–0.66× on
the ResNets; ``lapjvs``, timed in float32 (its fast mode, not exact for float64 similarities),
1.4–1.8× on the MLPs and 0.7–0.9× on the ResNets. No solver missed SciPy's optimum on any of
those matrices. Below 32 units SciPy was as fast on single groups' matrices (timed while choosing
``AUTO_LAPX_MIN``; no log). The sparse solver's assignments took 9.0× and 11.6× SciPy's time at
widths 1024 and 2048 (log ``docs/results/benchmarks/weight_matching-2026-12-04.log``; the
candidate problem is solved densely with forbidden edges, so it costs a dense solve per round
plus the certificate): an exact second solver, not a faster one, and
never a default.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import metadata

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import NegativeCycleError, bellman_ford

from lmc.config import LmcError

SOLVERS = ("auto", "scipy", "lapx", "sparse")
#: ``auto`` gives matrices of this many rows or more to lapx (where it can run), smaller ones
#: to SciPy: lapx's ``lapjvr`` was 1.6-4.2x as fast on the benchmark runs' assignments, SciPy
#: as fast on single matrices below 32 rows (module docstring).
AUTO_LAPX_MIN = 32

_TORCH_REDUCE_MIN = 256  # _reduced: torch from this many rows, NumPy below
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


def _scipy(s: torch.Tensor, work: torch.Tensor | None = None) -> torch.Tensor:
    rows, cols = linear_sum_assignment(_reduced(s, work), maximize=True)
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


def _reduced(s: torch.Tensor, work: torch.Tensor | None = None) -> np.ndarray:
    """``s`` (float64, CPU) less its row maxima, then its column maxima: every entry ≤ 0, the
    same optimum; what both dense solvers are given, so they see the same numbers. A new array
    (the callers may modify it), or ``work`` (a float64 CPU buffer of at least ``s.numel()``
    values, kept by the caller between solves: fresh memory of this size costs page faults),
    computed in place: torch's threaded reductions on large matrices, NumPy's on small ones
    (torch's cost ~1 ms per call there: thread start-up); both give the same numbers."""
    x = s.detach().to("cpu", torch.float64)
    if x.shape[0] >= _TORCH_REDUCE_MIN:
        if work is not None and work.numel() >= x.numel():
            x = work[: x.numel()].view(x.shape).copy_(x)
        else:
            x = x.clone()
        x -= x.amax(dim=1, keepdim=True)
        x -= x.amax(dim=0, keepdim=True)
        return x.numpy()
    y = x.numpy().copy()
    y -= y.max(axis=1, keepdims=True)
    y -= y.max(axis=0, keepdims=True)
    return y


def _lapx(s: torch.Tensor, work: torch.Tensor | None = None) -> torch.Tensor:
    """lapx's Jonker–Volgenant on the reduced ``s`` negated into costs ≥ 0 and scaled by a power
    of two into [0, 1) (exact, so the optimum is the same): ``lap.lapjvr`` in float64 (lapx's
    Rust solver, 1.6–4.2× SciPy's speed on weight-matching matrices of 16 to 4096 units here:
    module docstring), else ``lap.lapjv`` (lapx builds without the Rust solvers)."""
    import lap

    cost = _reduced(s, work)
    np.negative(cost, out=cost)
    top = float(cost.max()) if cost.size else 0.0
    if top > 0:
        np.ldexp(cost, -int(np.frexp(top)[1]), out=cost)
    if hasattr(lap, "lapjvr"):
        rows, cols = lap.lapjvr(cost, return_cost=False, precision="float64")
        out = torch.empty(s.shape[0], dtype=torch.long)
        out[torch.from_numpy(np.asarray(rows, dtype=np.int64))] = torch.from_numpy(
            np.asarray(cols, dtype=np.int64)
        )
        return out
    _, x, _ = lap.lapjv(cost)
    return torch.from_numpy(np.asarray(x, dtype=np.int64))


#: The fixed matrices lapx must solve to SciPy's optimum before ``auto`` picks it: sizes 1-40,
#: ties (integer and constant entries), tiny, huge and negative values.
def _check_matrices() -> list[np.ndarray]:
    rng = np.random.default_rng(20261204)
    out = []
    for i in range(32):
        n = 1 + (i * 7) % 40
        kind = i % 6
        if kind == 0:
            m = rng.standard_normal((n, n))
        elif kind == 1:
            m = rng.integers(0, 3, (n, n)).astype(float)
        elif kind == 2:
            m = np.full((n, n), float(i % 5 - 2))
        elif kind == 3:
            m = rng.standard_normal((n, n)) * 1e-9
        elif kind == 4:
            m = rng.standard_normal((n, n)) * 1e12
        else:
            m = -rng.random((n, n)) * 50.0 - 1e3
        out.append(m)
    return out


@functools.cache
def lapx_problem() -> str | None:
    """Why the ``lapx`` solver cannot be used here (``None``: it can). It needs the ``lapx``
    distribution (``pip install 'lmc[fast]'``; it installs the module ``lap``, which the older
    ``lap`` package also provides, so the distribution is what is checked), and its answers on
    :func:`_check_matrices` must reach SciPy's optimum (a broken build is never used)."""
    try:
        version = metadata.version("lapx")
    except metadata.PackageNotFoundError:
        return "the lapx package is not installed (pip install 'lmc[fast]')"
    try:
        import lap  # noqa: F401  (lapx's module)
    except ImportError as exc:  # pragma: no cover - a broken install
        return f"lapx {version} is installed but does not import: {exc}"
    for m in _check_matrices():
        rows, cols = linear_sum_assignment(m, maximize=True)
        best = float(m[rows, cols].sum())
        try:
            p = _lapx(torch.from_numpy(m)).numpy()
        except Exception as exc:  # noqa: BLE001 - any failure means: do not use it
            return f"lapx {version} failed its check: {exc}"
        n = m.shape[0]
        value = float(m[np.arange(n), p].sum()) if sorted(p.tolist()) == list(range(n)) else None
        if value is None or abs(value - best) > 1e-9 * max(float(np.abs(m).sum()), 1e-300):
            return f"lapx {version} missed SciPy's optimum on its check matrix of size {n}"
    return None


def resolve_solver(solver: str) -> str:
    """``solver`` as it will run here: ``auto`` stays ``auto`` where lapx can run (lapx for
    matrices of :data:`AUTO_LAPX_MIN` rows or more, SciPy below) and is ``scipy`` where
    :func:`lapx_problem` finds a problem; ``lapx`` where it cannot run is an ``LmcError``
    saying why; an unknown name is an ``LmcError``."""
    if solver not in SOLVERS:
        raise LmcError(f"solver must be one of {', '.join(SOLVERS)}, got {solver!r}")
    if solver == "auto":
        return "scipy" if lapx_problem() else "auto"
    if solver == "lapx" and lapx_problem():
        raise LmcError(f"solver 'lapx' cannot run: {lapx_problem()}; or use solver 'scipy'")
    return solver


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
    work: torch.Tensor | None = None,
) -> Assignment:
    """The exact maximiser ``p`` of ``Σ_i similarity[i, p[i]]``, with its certificate.

    ``solver``: ``scipy``, ``lapx``, ``sparse`` or ``auto`` (``lapx`` for matrices of
    :data:`AUTO_LAPX_MIN` rows or more where lapx is installed and passed its check, else
    ``scipy``: :func:`resolve_solver`; see the module docstring);
    ``prices`` (n,) and ``start`` (a permutation) warm-start the sparse solver (from the last
    solve of a similar matrix); ``k``: candidate columns per row; matrices smaller than
    ``min_size`` go to SciPy whatever ``solver`` says when it is ``sparse`` (the sparse
    rounds' overhead does not pay below it). ``work``: a float64 CPU tensor of at least n²
    values the dense solvers may overwrite, kept by a caller that solves many large matrices
    (fresh memory of that size costs page faults on every solve). Non-finite entries are the
    caller's to refuse. Every solver is exact; where several permutations tie for the optimum
    they may return different ones (each always the same one for the same matrix).
    """
    _check_square(similarity)
    solver = resolve_solver(solver)
    n = similarity.shape[0]
    if n == 0:
        return Assignment(torch.zeros(0, dtype=torch.long), None, 0)
    if solver == "lapx" or (solver == "auto" and n >= AUTO_LAPX_MIN):
        return Assignment(_lapx(similarity, work), None, 0)
    if solver in ("scipy", "auto") or n < max(min_size, 2):
        return Assignment(_scipy(similarity, work), None, 0)
    return _sparse(similarity, prices, start, k)


def linear_assignment(similarity: torch.Tensor, solver: str = "scipy") -> torch.Tensor:
    """The permutation ``p`` maximising ``Σ_i similarity[i, p[i]]`` (an int64 CPU tensor).

    Rows are A's units, columns B's; ``p[i]`` is the unit of B matched to unit ``i`` of A, so
    applying ``p`` to B puts B's units in A's order. Exact with every ``solver`` (see
    :func:`solve_assignment`; the default stays SciPy's here, as activation matching and the
    head steps use it); non-finite entries are the caller's to refuse.
    """
    return solve_assignment(similarity, solver=solver).perm
