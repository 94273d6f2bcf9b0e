"""Weight matching (Git Re-Basin, Algorithm 1), with incremental similarity updates.

Maximise Σ ⟨θ_A, π(θ_B)⟩ over the permutations of a spec by coordinate descent: visit the
permutations in a seeded random order; for permutation ``g`` solve one linear assignment on

    S_g = Σ_{(t, k) indexed by g}  A_t^(k) · (B_t with its other axes permuted)^(k)ᵀ

where ``X^(k)`` moves axis ``k`` of ``X`` to the front and flattens the rest (a segment of a
concatenated or flattened axis contributes its own rows, ``repeat`` columns per unit). Stop
after a full pass without improvement, judged with a relative tolerance on the objective.

Speed (``benchmarks/weight_matching.py`` measures it against Git Re-Basin's loop):

- the flattened slices ``A_t^(k)``, ``B_t^(k)`` are views of the tensors (no copies where the
  layout allows: every 2-D weight, on either axis), so matching adds little memory beyond the
  similarity matrices; slices whose columns never move (biases, norm parameters, a first
  layer, an embedding's vocabulary axis) are multiplied once;
- each ``S_g`` is kept between visits with the column order of ``B`` it reflects; on the next
  visit only columns whose order changed (a neighbouring permutation moved some units) are
  updated, ``S_g += A[:, c] (B[:, new_c] − B[:, old_c])ᵀ``, so late passes cost a fraction of
  a full product, and a term whose permutations were not replaced is skipped outright;
- a group whose ``S_g`` did not change since its last assignment is not solved again (the
  answer would be the same);
- the assignment solver (:mod:`lmc.perm.solvers.assignment`, every one exact): ``solver="auto"``
  (the default) is lapx's Jonker–Volgenant (``pip install 'lmc[fast]'``) on groups of 32 units or
  more where lapx is installed and passes its check against SciPy (measured 2.5–4x faster
  there), else SciPy's dense ``linear_sum_assignment`` (``solver="scipy"``, what every
  committed result ran with). ``solver="sparse"`` (a certified
  candidate-set solver warm-started from the group's last prices and permutation, for groups
  of 1024 units or more) is exact too, but measured slower than SciPy, so it is an option,
  never the default. Solvers may break exact ties between optimal assignments differently, so
  a result that must reproduce bit for bit names its solver;
- the start matters more than the solver: ``init="onepass"`` (the default; Git Re-Basin's
  greedy one-pass answer, then coordinate descent) reached a higher objective in fewer passes
  than the identity start on the benchmark's digits MLPs (``benchmarks/weight_matching.py
  --init onepass``; docs/performance.md quotes the figures). The descent keeps the similarity
  products the one-pass step made (each layer's incoming weights under the decided permutations) and
  adds only the terms it left out, so the start costs its assignments and little else.
  ``init="identity"`` is Git Re-Basin's own start (and the one every committed result before
  the one-pass default ran with: their recipes name it).

Attention heads (``spec.heads``): a head group and the groups nested in it (the q/k and v/o
dims of one attention layer) are one coordinate. Its step scores every (head of A, head of B)
pair by the best within-head assignment of each nested group on that pair's ``d x d`` block of
``S_g`` (plus ``S_head`` where whole heads index a tensor), solves one assignment over heads and
keeps the within-head assignments of the chosen pairs
(:func:`lmc.perm.symmetries.head_permutations.nested_assignment`).

Products run on the tensors' device in their precision (float32 for float32 weights) and are
accumulated into ``S_g`` in float64.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from lmc.config import LmcError, check_finite, check_int
from lmc.config.progress import complete, progress_bar
from lmc.models.compare import check_same_architecture

from ..solvers.assignment import SOLVERS, Assignment, resolve_solver, solve_assignment
from ..symmetries.head_permutations import head_value, nested_assignment, nested_of
from ..symmetries.permutation_spec import AxisEntry, PermutationSpec, axis_index
from ..symmetries.permutations import (
    MatchResult,
    WorkBuffer,
    check_permutation,
    identity_permutation,
    matching_objective,
)
from .registry import (
    AlignJob,
    AlignmentMethod,
    MethodOutput,
    MethodSetting,
    MethodStyle,
    register_method,
)


@dataclass
class _Term:
    """One (tensor, axis, segment) indexed by a group: the rows of ``a``/``b`` are its units."""

    name: str
    a: torch.Tensor  # (repeat * K, n): column k of A's flattened slice is row k (a view)
    b: torch.Tensor  # (repeat * K, n): the same for B, in B's stored column order
    others: tuple[tuple[AxisEntry, int], ...]  # (entry, size) of every other axis, in order
    repeat: int
    col: torch.Tensor | None = None  # the column order S currently reflects (None: not yet)
    constant: bool = False  # no other axis is permuted: the column order never changes
    built: bool = False  # its product is in S_g
    seen: tuple = ()  # the permutation tensors ``col`` was computed from (compared by identity)
    deps: tuple[str, ...] = ()  # the permutations on the other axes: the term depends on these

    def __post_init__(self) -> None:
        self.deps = tuple(sorted({s.perm for e, _ in self.others for s in e or () if s.perm}))

    def unchanged(self, perm: Mapping[str, torch.Tensor]) -> bool:
        """Whether no permutation this term depends on was replaced since ``col`` was set."""
        now = tuple(perm[g] for g in self.deps)
        return len(now) == len(self.seen) and all(x is y for x, y in zip(now, self.seen))

    def column_order(self, perm: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
        """Gather index over the flattened other axes under ``perm`` (``None`` = identity)."""
        if self.constant:
            return None
        device = self.b.device
        flat = torch.zeros(1, dtype=torch.long, device=device)
        for entry, size in self.others:
            idx = (
                axis_index(entry, perm, device)
                if entry is not None
                else torch.arange(size, device=device)
            )
            flat = (flat[:, None] * size + idx[None, :]).reshape(-1)
        if self.repeat > 1:
            k = flat.numel()
            within = torch.arange(self.repeat, device=device)[:, None] * k
            flat = (within + flat[None, :]).reshape(-1)
        return flat


_STEP_TOL = 1e-12  # a step must beat its group's current value by this much (float noise)
_SPARSE_MIN = 1024  # groups this large use the sparse solver (``solver='sparse'``)


def _rows(x: torch.Tensor, index: torch.Tensor, out: WorkBuffer) -> torch.Tensor:
    """``x.index_select(0, index)`` for a (K, n) slice, into ``out``'s buffer; a slice that is
    the transposed view of a weight (``x.T`` contiguous) is gathered as columns of that weight,
    3x faster than gathering its strided rows (the result is the transposed view of the
    gathered weight)."""
    if x.dim() == 2 and x.T.is_contiguous() and x.shape[1] > 1:
        buf = out.get((x.shape[1], index.numel()), x.dtype)
        return torch.index_select(x.T, 1, index, out=buf).T
    buf = out.get((index.numel(), *x.shape[1:]), x.dtype)
    return torch.index_select(x, 0, index, out=buf)


def _compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def _build_terms(
    spec: PermutationSpec,
    state_a: Mapping[str, torch.Tensor],
    state_b: Mapping[str, torch.Tensor],
) -> dict[str, list[_Term]]:
    terms: dict[str, list[_Term]] = {g: [] for g in spec.group_sizes}
    shapes = spec.shapes
    for name in spec.permuted_names:
        if name not in state_a or name not in state_b:
            continue
        ta = state_a[name].detach()
        tb = state_b[name].detach().to(ta.device)
        for t, which in ((ta, "A"), (tb, "B")):
            if tuple(t.shape) != shapes[name]:
                raise LmcError(
                    f"{name!r} of model {which} has shape {list(t.shape)}, but the spec expects "
                    f"{list(shapes[name])}"
                )
        dtype = _compute_dtype(ta, tb)
        entries = spec[name]
        for axis, entry in enumerate(entries):
            if entry is None:
                continue
            others = tuple((entries[j], shapes[name][j]) for j in range(len(entries)) if j != axis)
            constant = all(e is None for e, _ in others)
            offset = 0
            for seg in entry:
                if seg.perm is not None:
                    rows = seg.size
                    a = ta.narrow(axis, offset, seg.extent).movedim(axis, 0)
                    b = tb.narrow(axis, offset, seg.extent).movedim(axis, 0)
                    # (K, n) views of the tensors where their layout allows (a 2-D weight on
                    # either axis): the slices cost no memory of their own, which is what
                    # bounds matching large models (GPT-2: every block weight twice per model)
                    a = a.reshape(rows, -1).T.to(dtype)
                    b = b.reshape(rows, -1).T.to(dtype)
                    terms[seg.perm].append(_Term(name, a, b, others, seg.repeat, None, constant))
                offset += seg.extent
    return terms


class SimilarityMatrices:
    """The similarity ``S_g`` of every group of ``spec``, kept up to date incrementally.

    What :func:`weight_matching` runs on (see the module docstring): ``S_g[i, j]`` is the
    inner product of A's unit ``i`` with B's unit ``j`` of group ``g`` over every tensor the
    group indexes, with B's other axes permuted by the current permutations. Built from
    ``state_a`` and ``state_b`` (whose tensors must have the spec's shapes, else
    ``LmcError``); the products run on A's device in the tensors' precision and are
    accumulated in float64.

    >>> sim = SimilarityMatrices(spec, state_a, state_b)
    >>> sim.update("fc1", perm)        # S_fc1 under ``perm`` (only changed columns recomputed)
    >>> s = sim.matrix("fc1")          # (n, n) float64; rows: A's units, columns: B's
    """

    def __init__(
        self,
        spec: PermutationSpec,
        state_a: Mapping[str, torch.Tensor],
        state_b: Mapping[str, torch.Tensor],
        max_bytes: int | None = None,
    ) -> None:
        self.sizes = spec.group_sizes
        self.terms = _build_terms(spec, state_a, state_b)
        self.device = next(
            (t.a.device for ts in self.terms.values() for t in ts), torch.device("cpu")
        )
        self.max_bytes = max_bytes
        self.evictions = 0
        self._s: dict[str, torch.Tensor] = {}  # made at a group's first update
        self._recent: OrderedDict[str, None] = OrderedDict()  # least recently updated first
        self._bytes = 0
        self._fresh = {g: False for g in self.sizes}  # S_g built at least once
        # work buffers kept between products (see WorkBuffer): the product and its float64
        # copy, and the gathered rows of B (new and old order) and of A
        self._product, self._wide = WorkBuffer(self.device), WorkBuffer(self.device)
        self._gathered, self._old = WorkBuffer(self.device), WorkBuffer(self.device)
        self._own = WorkBuffer(self.device)
        self._assignment = WorkBuffer(torch.device("cpu"))

    def assignment_work(self, group: str) -> torch.Tensor:
        """A kept float64 CPU buffer for the assignment solver on ``S_group``
        (:func:`lmc.perm.solvers.assignment.solve_assignment`'s ``work``)."""
        return self._assignment.get((self.sizes[group] ** 2,), torch.float64)

    def _accumulate(self, s: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> None:
        """``s += x @ y``: the product in the operands' precision, accumulated in ``s``'s
        (float64), through kept buffers (the same numbers as ``s += x @ y``)."""
        product = torch.mm(x, y, out=self._product.get((x.shape[0], y.shape[1]), x.dtype))
        if product.dtype != s.dtype:
            product = self._wide.get(tuple(product.shape), s.dtype).copy_(product)
        s += product

    def matrix(self, group: str) -> torch.Tensor:
        """The current ``S_group`` (live: updated in place by :meth:`update`; do not modify).
        Only after an :meth:`update` of it (an evicted matrix is rebuilt there)."""
        return self._s[group]

    def _nbytes(self, group: str) -> int:
        return self.sizes[group] ** 2 * 8

    def _hold(self, group: str, keep: Collection[str]) -> torch.Tensor:
        """``S_group``, made (zero) if it is not held, after evicting the least recently
        updated other matrices (never those in ``keep``) while ``max_bytes`` would be passed."""
        if group in self._s:
            self._recent.move_to_end(group)
            return self._s[group]
        need = self._nbytes(group)
        if self.max_bytes is not None:
            for victim in [g for g in self._recent if g != group and g not in keep]:
                if self._bytes + need <= self.max_bytes:
                    break
                self._evict(victim)
        n = self.sizes[group]
        self._s[group] = torch.zeros(n, n, dtype=torch.float64, device=self.device)
        self._recent[group] = None
        self._bytes += need
        return self._s[group]

    def _evict(self, group: str) -> None:
        """Release ``S_group``: its next update rebuilds it from every term."""
        del self._s[group], self._recent[group]
        self._bytes -= self._nbytes(group)
        self._fresh[group] = False
        for term in self.terms[group]:
            term.col, term.built, term.seen = None, False, ()
        self.evictions += 1

    def update(
        self,
        group: str,
        perm: Mapping[str, torch.Tensor],
        within: Collection[str] | None = None,
        keep: Collection[str] = (),
    ) -> bool:
        """Bring ``S_group`` up to date with ``perm``; return whether it changed.

        ``perm``: group -> index tensor for every group the spec has. Permutations are compared
        by identity: pass the same tensor object for a group that did not change (never modify
        one in place), so that terms depending only on unchanged groups are skipped.
        ``within``: build only the terms whose other permuted axes all belong to these groups
        (the one-pass baseline's partial similarity); the other terms stay out of ``S_group``
        until an update without ``within`` adds them, so the products made for a one-pass start
        are reused by the descent that follows it.

        With ``max_bytes`` (the most bytes of float64 matrices held), a matrix not updated for
        a while may have been released to stay under it; it is rebuilt here from every term
        (and reported as changed). ``keep``: groups whose matrices must stay held now (the
        other members of the coordinate being solved).
        """
        s = self._hold(group, keep)
        changed = not self._fresh[group]
        self._fresh[group] = True
        for term in self.terms[group]:
            if within is not None and not term.built and any(d not in within for d in term.deps):
                continue  # left out for now; a later full update builds it
            if term.built and (term.constant or term.unchanged(perm)):
                continue  # permutations are replaced, never modified in place
            new = term.column_order(perm)
            term.seen = tuple(perm[g] for g in term.deps)
            if not term.built:
                b = term.b if new is None else _rows(term.b, new, self._gathered)
                self._accumulate(s, term.a.T, b)
                term.col, term.built = new, True
                changed = True
                continue
            if new is None:
                continue
            diff = (new != term.col).nonzero().squeeze(1)
            if diff.numel() == 0:
                continue
            if diff.numel() == new.numel():
                delta = _rows(term.b, new, self._gathered)
                delta -= _rows(term.b, term.col, self._old)
                self._accumulate(s, term.a.T, delta)
            else:
                delta = _rows(term.b, new[diff], self._gathered)
                delta -= _rows(term.b, term.col[diff], self._old)
                self._accumulate(s, _rows(term.a, diff, self._own).T, delta)
            term.col = new
            changed = True
        return changed


@dataclass(frozen=True, eq=False)
class WeightMatchingResult(MatchResult):
    """What :func:`weight_matching` returns.

    ``perm``: group -> int64 CPU index tensor for B (``apply_permutation(spec, result.perm,
    state_b)`` has B's units in A's order). The objective is Σ ⟨θ_A, π(θ_B)⟩:
    ``objective_before`` at the identity, ``objective_init`` at the start (``init_perm``, the
    one-pass answer for ``init="onepass"``, else the identity), ``objective_after`` recomputed
    at ``perm``; ``objective_per_pass`` after each pass (the initial objective plus the gains
    of the steps taken, exact up to the products' float32 rounding when no tensor carries one
    permutation on two axes). ``passes``: coordinate-descent passes run; ``assignments``:
    linear assignments solved; ``converged``: whether the descent stopped by ``tol`` rather
    than ``max_iter``. With restarts these four describe the winning restart.
    ``restart_objectives``: ``objective_after`` of each restart (restart ``r`` visits in the
    order of seed ``seed + r``); ``best_restart``: the index of the one returned (the first
    of the best); ``restart_seconds``: each restart's time. ``start``: ``identity``,
    ``onepass`` or ``given`` (``init_perm``); ``solver``: the assignment solver as it ran here
    (:func:`lmc.perm.solvers.assignment.resolve_solver`: ``auto`` only where lapx could run, so that
    its groups of 32 units or more were lapx's; ``scipy`` for ``auto`` without lapx).
    """

    objective_before: float
    objective_init: float
    objective_after: float
    objective_per_pass: tuple[float, ...]
    passes: int
    assignments: int
    converged: bool
    restart_objectives: tuple[float, ...] = ()
    best_restart: int = 0
    restart_seconds: tuple[float, ...] = ()
    start: str = "identity"
    solver: str = "scipy"


INITS = ("identity", "onepass")


def weight_matching(
    spec: PermutationSpec,
    state_a: Mapping[str, torch.Tensor],
    state_b: Mapping[str, torch.Tensor],
    seed: int = 0,
    max_iter: int = 100,
    init_perm: Mapping[str, torch.Tensor] | None = None,
    tol: float = 1e-4,
    quiet: bool = True,
    *,
    restarts: int = 1,
    init: str | None = None,
    solver: str = "auto",
    similarity_bytes: int | None = None,
) -> WeightMatchingResult:
    """The permutation of B's units that best matches A's weights (returned for B).

    Coordinate descent on Σ ⟨θ_A, π(θ_B)⟩ over every tensor of the spec with a permuted axis
    (see the module docstring). ``seed`` fixes the random visiting order of each pass. The
    start: ``init_perm`` (a permutation, e.g. activation matching's ``perm``), else ``init``:
    ``"onepass"`` (the default when ``init`` is ``None``: :func:`one_pass_matching`'s answer,
    one more assignment per group, whose products the descent reuses) or ``"identity"`` (Git
    Re-Basin's start; the committed recipes name it). A step is taken when its assignment raises the
    objective (by more than 1e-12 of its group's part, so float noise never moves units).
    Progress is judged on the whole objective with the relative tolerance ``tol``: the
    descent stops after the first pass that raises it by no more than ``tol`` × |objective|
    (``tol=0``: only a pass without any step stops it, as in Git Re-Basin's code), or after
    ``max_iter`` passes. The default 1e-4 ends the long tail of passes that each add a
    hundredth of a percent; known permutations are still recovered exactly (their passes
    gain far more), and the benchmark reports the objective reached against full convergence.

    ``restarts=K`` runs the descent K times from the same start with the visiting orders of
    seeds ``seed, seed + 1, ..., seed + K − 1`` and keeps the highest objective: K times the
    time of one run (restart 0 is exactly the single run, so K restarts never end lower).
    ``solver``: ``auto`` (default: ``lapx`` for groups of 32 units or more where it is
    installed and checked, else ``scipy``), ``scipy``, ``lapx`` or ``sparse`` (the certified
    warm-started solver of :mod:`lmc.perm.solvers.assignment` for groups of 1024 units or more,
    SciPy's below; measured slower);
    all give exact optima, and may break exact ties differently
    (:mod:`lmc.perm.solvers.assignment`). The one-pass start uses the same solver. Head groups'
    assignments are always SciPy's.

    ``similarity_bytes``: the most memory the kept similarity matrices (float64, n² × 8 bytes
    per group) may hold; ``None`` (default) keeps every group's between visits. Under a limit
    the least recently visited are released and rebuilt in full at their next visit: more
    products, the same answer up to float rounding. A model with many wide groups needs it
    (GPT-2-large: 36 MLP groups of 5120 units, 7.5 GB;
    :func:`lmc.perm.methods.weight_matching_files.match_files`).

    Returns a :class:`WeightMatchingResult`: ``result.perm`` (group -> int64 CPU tensor) is
    such that ``apply_permutation(spec, result.perm, state_b)`` has B's units in A's order;
    its other fields report the objective, passes, assignments, convergence and restarts.
    """
    max_iter = check_int("max_iter", max_iter, minimum=1)
    restarts = check_int("restarts", restarts, minimum=1)
    if not tol >= 0:
        raise LmcError(f"tol must be a non-negative number, got {tol}")
    if init is not None and init not in INITS:
        raise LmcError(f"init must be one of {', '.join(INITS)}, got {init!r}")
    if init_perm is not None and init == "onepass":
        raise LmcError(f"give either init_perm or init={init!r}, not both")
    solver = resolve_solver(solver)
    start_name = "given" if init_perm is not None else (init or "onepass")
    check_same_architecture(state_a, state_b, purpose="weight matching")
    check_finite("model A's weights", state_a)
    check_finite("model B's weights", state_b)
    if init_perm is not None:
        check_permutation(spec, init_perm)
    objective_before = matching_objective(spec, state_a, state_b)
    reuse: SimilarityMatrices | None = None  # the one-pass products, for restart 0
    solved: set[str] = set()  # groups whose one-pass assignment already saw their whole S_g
    if start_name == "onepass":
        init_perm, _, reuse, solved = _one_pass(spec, state_a, state_b, solver, similarity_bytes)
    start = {
        g: p.clone().long().cpu() for g, p in (init_perm or identity_permutation(spec)).items()
    }
    objective_init = (
        matching_objective(spec, state_a, state_b, start)
        if init_perm is not None
        else objective_before
    )
    runs: list[WeightMatchingResult] = []
    seconds: list[float] = []
    for r in range(restarts):
        t0 = time.perf_counter()
        perm, per_pass, passes, assignments, converged = _descend(
            spec,
            state_a,
            state_b,
            dict(start),
            objective_init,
            int(seed) + r,
            max_iter,
            tol,
            quiet,
            solver,
            reuse if r == 0 else None,
            solved if r == 0 else set(),
            similarity_bytes,
        )
        runs.append(
            WeightMatchingResult(
                perm=perm,
                objective_before=objective_before,
                objective_init=objective_init,
                objective_after=matching_objective(spec, state_a, state_b, perm),
                objective_per_pass=tuple(per_pass),
                passes=passes,
                assignments=assignments,
                converged=converged,
                start=start_name,
                solver=solver,
            )
        )
        seconds.append(time.perf_counter() - t0)
    objectives = tuple(run.objective_after for run in runs)
    best = max(range(restarts), key=lambda i: (objectives[i], -i))
    return replace(
        runs[best],
        restart_objectives=objectives,
        best_restart=best,
        restart_seconds=tuple(seconds),
    )


def _descend(
    spec: PermutationSpec,
    state_a: Mapping[str, torch.Tensor],
    state_b: Mapping[str, torch.Tensor],
    perm: dict[str, torch.Tensor],
    objective: float,
    seed: int,
    max_iter: int,
    tol: float,
    quiet: bool,
    solver: str,
    sim: SimilarityMatrices | None = None,
    solved: set[str] | None = None,
    similarity_bytes: int | None = None,
) -> tuple[dict[str, torch.Tensor], list[float], int, int, bool]:
    """One coordinate descent from ``perm`` (replaced, never modified in place): the final
    permutation, the objective after each pass (``objective`` plus the gains), passes,
    assignments and whether ``tol`` stopped it. ``sim``: similarity matrices already built
    for these states (the one-pass start's), brought up to date at each visit; ``solved``:
    groups whose ``perm`` is already the assignment of their current ``S_g`` in ``sim`` (not
    solved again until ``S_g`` changes)."""
    sizes = spec.group_sizes
    per_pass: list[float] = []
    sim = sim or SimilarityMatrices(spec, state_a, state_b, similarity_bytes)
    device = sim.device
    dev_perm = {g: p.to(device) for g, p in perm.items()}
    heads = spec.heads
    nested = nested_of(heads)
    # coordinates: a plain group, or a head group with the groups nested in it
    names = [g for g in sizes if g not in heads]
    gen = torch.Generator().manual_seed(seed)
    dirty = {g: g not in (solved or ()) for g in names}
    warm: dict[str, Assignment] = {}  # each group's last solve: its prices warm-start the next
    assignments = 0
    converged = False
    passes = 0
    # a bar advanced by hand: it ends full (complete) when the descent converges early
    with progress_bar(max_iter, quiet=quiet, desc="weight matching", unit="pass") as bar:
        for _ in range(max_iter):
            passes += 1
            gained = 0.0
            steps = 0
            for gi in torch.randperm(len(names), generator=gen).tolist():
                g = names[gi]
                members = [g, *nested.get(g, [])]
                changed = [sim.update(m, dev_perm, keep=members) for m in members]
                if any(changed):
                    dirty[g] = True
                if not dirty[g]:
                    continue  # S_g is what it was at the last assignment: same answer
                dirty[g] = False
                if g in nested:
                    n_heads = sizes[g]
                    head_s = sim.matrix(g) if sim.terms[g] else None
                    inner = [sim.matrix(m) for m in nested[g]]
                    head, flats, new_value = nested_assignment(head_s, inner, n_heads)
                    assignments += 1
                    old_value = head_value(
                        head_s, inner, dev_perm[g], [dev_perm[m] for m in nested[g]]
                    )
                    new_perm = dict(zip(members, [head, *flats]))
                else:
                    s = sim.matrix(g)
                    last = warm.get(g)
                    solved = solve_assignment(
                        s,
                        solver=solver,
                        prices=None if last is None else last.prices,
                        start=perm[g],
                        min_size=_SPARSE_MIN,
                        work=sim.assignment_work(g),
                    )
                    warm[g] = solved
                    new = solved.perm
                    assignments += 1
                    rows = torch.arange(s.shape[0], device=s.device)
                    old_value = float(s[rows, dev_perm[g]].sum())
                    new_value = float(s[rows, new.to(s.device)].sum())
                    new_perm = {g: new}
                if new_value - old_value > _STEP_TOL * max(abs(old_value), math.ulp(1.0)):
                    for m, p in new_perm.items():
                        perm[m] = p
                        dev_perm[m] = p.to(device)
                    gained += new_value - old_value
                    steps += 1
            objective += gained
            per_pass.append(objective)
            bar.update(1)
            if steps == 0 or gained <= tol * max(abs(objective), math.ulp(1.0)):
                converged = True
                break
        complete(bar, f"converged in pass {passes}" if converged else "max_iter reached")
    return perm, per_pass, passes, assignments, converged


def one_pass_matching(
    spec: PermutationSpec,
    state_a: Mapping[str, torch.Tensor],
    state_b: Mapping[str, torch.Tensor],
    *,
    solver: str = "auto",
) -> WeightMatchingResult:
    """Git Re-Basin's greedy baseline (App. A.7): match layer by layer in one pass.

    The groups are visited once, in the spec's order (the tracer's: from the input towards the
    output); group ``g``'s assignment scores only the tensors whose other permuted axes all
    belong to groups already decided: a layer's incoming weights under the previous layer's
    permutation and its bias, and the weights into an unpermuted layer (the classifier, whose
    outputs never move), but never the weights into a later permuted layer, which is not yet
    aligned. That is aligning layer 1, applying it, aligning layer 2, and so on, as
    uni-directional fusion methods do; weight matching instead revisits every layer with both
    its incoming and outgoing weights until no step helps. A
    head group is one step with the groups nested in it, as in :func:`weight_matching`. Cost: one
    product and one assignment per group. The result has the type of :func:`weight_matching`'s
    (``passes = 1``; ``objective_after`` on the full objective, so the two compare directly).
    ``solver``: as in :func:`weight_matching`.
    """
    check_same_architecture(state_a, state_b, purpose="weight matching")
    check_finite("model A's weights", state_a)
    check_finite("model B's weights", state_b)
    solver = resolve_solver(solver)
    perm, assignments, _, _ = _one_pass(spec, state_a, state_b, solver)
    objective_before = matching_objective(spec, state_a, state_b)
    after = matching_objective(spec, state_a, state_b, perm)
    return WeightMatchingResult(
        perm=perm,
        objective_before=objective_before,
        objective_init=objective_before,
        objective_after=after,
        objective_per_pass=(after,),
        passes=1,
        assignments=assignments,
        converged=True,
        solver=solver,
    )


def _one_pass(
    spec: PermutationSpec,
    state_a: Mapping[str, torch.Tensor],
    state_b: Mapping[str, torch.Tensor],
    solver: str,
    similarity_bytes: int | None = None,
) -> tuple[dict[str, torch.Tensor], int, SimilarityMatrices, set[str]]:
    """:func:`one_pass_matching`'s permutation and assignment count, with the similarity
    matrices it built (each ``S_g`` holds the terms the pass scored; a descent from this answer
    adds the rest instead of recomputing them) and the groups whose assignment saw every term
    of their ``S_g`` (and of their nested groups'), so the descent need not solve them again
    before one of those matrices changes."""
    sizes = spec.group_sizes
    perm = identity_permutation(spec)
    sim = SimilarityMatrices(spec, state_a, state_b, similarity_bytes)
    dev_perm = {g: p.to(sim.device) for g, p in perm.items()}
    nested = nested_of(spec.heads)
    decided: set[str] = set()
    complete: set[str] = set()
    assignments = 0
    for g in (g for g in sizes if g not in spec.heads):
        members = {g, *nested.get(g, [])}
        known = decided | members  # a later layer's permutation is not known in one pass
        for m in members:
            sim.update(m, dev_perm, within=known, keep=members)
        if g in nested:
            head_s = sim.matrix(g) if sim.terms[g] else None
            inner = [sim.matrix(m) for m in nested[g]]
            head, flats, _ = nested_assignment(head_s, inner, sizes[g])
            chosen = dict(zip([g, *nested[g]], [head, *flats]))
        else:
            chosen = {
                g: solve_assignment(
                    sim.matrix(g), solver=solver, min_size=_SPARSE_MIN, work=sim.assignment_work(g)
                ).perm
            }
        assignments += 1
        if all(t.built for m in members for t in sim.terms[m]):
            complete.add(g)
        for m, p in chosen.items():
            perm[m] = p.long().cpu()
            dev_perm[m] = p.to(sim.device)
        decided |= members
    return perm, assignments, sim, complete


# ---------------------------------------------------------------------------------------------
# the method's record: ``weight``


def _align(job: AlignJob, **settings: Any) -> MethodOutput:
    wm = weight_matching(
        job.spec, job.state_a, job.state_b, seed=job.seed, quiet=job.quiet, **settings
    )
    extras = {
        "solver": wm.solver,
        "passes": wm.passes,
        "assignments": wm.assignments,
        "converged": wm.converged,
        "objective_per_pass": list(wm.objective_per_pass),
    }
    if settings["restarts"] > 1:
        extras.update(restart_objectives=list(wm.restart_objectives), best_restart=wm.best_restart)
    return MethodOutput(wm.perm, extras)


METHOD = register_method(
    AlignmentMethod(
        "weight",
        _align,
        "weight matching: coordinate descent on sum <theta_A, pi(theta_B)> (data-free)",
        settings=(
            MethodSetting("max_iter", 100, "most coordinate-descent passes", minimum=1),
            MethodSetting(
                "tol",
                1e-4,
                "stop after a pass that raises the matching objective by at most this fraction "
                "(0: run until a pass changes nothing)",
                type=float,
                minimum=0.0,
            ),
            MethodSetting(
                "init",
                "onepass",
                "the start: Git Re-Basin's greedy one-pass answer (higher objectives in less time "
                "on the benchmark MLPs) or the identity (Git Re-Basin's own start)",
                type=str,
                choices=tuple(sorted(INITS, key=lambda init: init != "onepass")),
                legacy="identity",
            ),
            MethodSetting(
                "restarts",
                1,
                "run from K visiting orders and keep the highest objective (about K times the "
                "time)",
                minimum=1,
                legacy=1,
            ),
            MethodSetting(
                "solver",
                "auto",
                "the exact linear-assignment solver: auto (lapx on groups of 32 units or more "
                "where it is installed, else scipy), scipy, lapx or sparse; they may break exact "
                "ties differently",
                type=str,
                choices=tuple(SOLVERS),
                legacy="scipy",
            ),
        ),
        label="weight matching",
        order=20,
        style=MethodStyle("#D55E00", "s"),
    )
)
