"""The assignment solvers of lmc.perm.lap reach SciPy's optimum exactly, on any matrix."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import linear_sum_assignment

from lmc.config import LmcError
from lmc.perm import lap
from lmc.perm.lap import lapx_problem, linear_assignment, resolve_solver, solve_assignment

needs_lapx = pytest.mark.skipif(
    lapx_problem() is not None, reason=f"lapx cannot run here: {lapx_problem()}"
)


def _matrix(rng: np.random.Generator, i: int) -> np.ndarray:
    """The ``i``-th test matrix: sizes 1..200, value ranges from tiny to huge, ties."""
    n = int(rng.integers(1, 201)) if i % 4 else int(rng.integers(1, 12))
    kind = i % 8
    if kind == 0:
        return rng.standard_normal((n, n))
    if kind == 1:
        return rng.standard_normal((n, n)) * 1e-9  # tiny
    if kind == 2:
        return rng.standard_normal((n, n)) * 1e12  # huge
    if kind == 3:
        return -rng.random((n, n)) * 50.0 - 1e3  # all negative, far from zero
    if kind == 4:
        return rng.integers(0, 3, (n, n)).astype(float)  # integer valued: many ties
    if kind == 5:
        return np.full((n, n), float(rng.integers(-5, 6)))  # constant: every permutation ties
    if kind == 6:  # low rank plus integer noise: structured, with ties
        u, v = rng.integers(-2, 3, (n, 1)), rng.integers(-2, 3, (1, n))
        return (u * v + rng.integers(0, 2, (n, n))).astype(float)
    # a near-permutation matrix (what late weight-matching passes see), perturbed
    s = rng.standard_normal((n, n)) * 0.1
    s[np.arange(n), rng.permutation(n)] += 5.0
    return s


def _check(s: np.ndarray, perm: torch.Tensor, best: float) -> None:
    n = s.shape[0]
    p = perm.numpy()
    assert p.dtype == np.int64 and sorted(p.tolist()) == list(range(n))  # a permutation
    value = float(s[np.arange(n), p].sum())
    tol = 1e-9 * max(float(np.abs(s).sum()), 1e-300)
    assert abs(value - best) <= tol, (n, value, best)


def _matrices(rng: np.random.Generator):
    """The 1000 test matrices drawn from ``rng`` in turn (a caller may draw from it between
    them), each as ``(i, s, s as a tensor, SciPy's optimal objective)``."""
    for i in range(1000):
        s = _matrix(rng, i)
        rows, cols = linear_sum_assignment(s, maximize=True)
        yield i, s, torch.from_numpy(s), float(s[rows, cols].sum())


def test_both_solvers_reach_scipys_objective_on_1000_matrices():
    rng = np.random.default_rng(0)
    certified = 0
    for i, s, st, best in _matrices(rng):
        _check(s, linear_assignment(st), best)
        # the sparse solver on every size (min_size=1), cold and warm-started from prices of a
        # perturbed copy (what weight matching hands it)
        cold = solve_assignment(st, solver="sparse", min_size=1, k=4)
        _check(s, cold.perm, best)
        certified += cold.prices is not None
        if cold.prices is not None and i % 3 == 0:
            noise = torch.from_numpy(rng.standard_normal(s.shape)) * 0.1 * (np.abs(s).max() + 1)
            prev = solve_assignment(st + noise, solver="sparse", min_size=1, k=4)
            warm = solve_assignment(
                st, solver="sparse", min_size=1, k=4, prices=prev.prices, start=prev.perm
            )
            _check(s, warm.perm, best)
    # the certificate itself answers nearly always (the dense fallback is the exception)
    assert certified > 900


@needs_lapx
def test_lapx_reaches_scipys_objective_on_the_same_1000_matrices_and_is_deterministic(
    monkeypatch,
):
    """lapx (``auto``'s solver for large matrices where installed) on the matrices above, ties
    included: SciPy's optimum on every one; where several permutations tie it may pick another
    optimal one than SciPy, but always the same one for the same matrix."""
    monkeypatch.setattr(lap, "AUTO_LAPX_MIN", 1)  # auto: lapx on every size
    rng = np.random.default_rng(0)
    other = 0
    for i, s, st, best in _matrices(rng):
        first = linear_assignment(st, solver="lapx")
        _check(s, first, best)
        assert torch.equal(first, solve_assignment(st, solver="auto").perm)
        if i % 10 == 0:
            assert torch.equal(first, linear_assignment(st.clone(), solver="lapx"))
        other += not torch.equal(first, linear_assignment(st))
    assert other > 0  # ties broken differently from SciPy: why recipes name their solver


@needs_lapx
def test_auto_gives_small_matrices_to_scipy_and_large_ones_to_lapx():
    rng = np.random.default_rng(1)
    for n in (lap.AUTO_LAPX_MIN - 1, lap.AUTO_LAPX_MIN):
        s = torch.from_numpy(rng.integers(0, 3, (n, n)).astype(float))  # ties: solvers differ
        auto = solve_assignment(s, solver="auto").perm
        own = "scipy" if n < lap.AUTO_LAPX_MIN else "lapx"
        assert torch.equal(auto, linear_assignment(s, solver=own)), n


def test_auto_is_scipy_where_lapx_cannot_run_and_lapx_is_then_refused(monkeypatch):
    monkeypatch.setattr(lap, "lapx_problem", lambda: "the lapx package is not installed")
    assert resolve_solver("auto") == "scipy"
    s = torch.tensor([[0.0, 2.0], [3.0, 0.0]])
    assert solve_assignment(s, solver="auto").perm.tolist() == [1, 0]
    with pytest.raises(LmcError, match="'lapx' cannot run: the lapx package is not installed"):
        solve_assignment(s, solver="lapx")


def test_lapx_is_checked_against_scipy_before_auto_uses_it(monkeypatch):
    """A lapx build that misses SciPy's optimum on the check matrices is never used."""
    lapx_problem.cache_clear()
    try:
        monkeypatch.setattr(lap, "_lapx", lambda s: torch.arange(s.shape[0]))  # "broken"
        problem = lapx_problem()
        if problem is not None and "not installed" in problem:
            pytest.skip(problem)
        assert problem is not None and "missed SciPy's optimum" in problem
        assert resolve_solver("auto") == "scipy"
    finally:
        lapx_problem.cache_clear()


def test_the_certificate_rejects_a_candidate_set_missing_the_optimum():
    # row 0's best column is outside its top-1 candidate once prices are wrong: the dense check
    # must add it rather than accept the sparse optimum
    s = torch.tensor([[0.0, 1.0, 10.0], [1.0, 0.0, 0.0], [0.0, 9.0, 0.0]], dtype=torch.float64)
    bad_prices = torch.tensor([0.0, 0.0, 100.0], dtype=torch.float64)
    out = solve_assignment(s, solver="sparse", min_size=1, k=1, prices=bad_prices)
    assert out.perm.tolist() == [2, 0, 1]
    assert out.prices is not None and out.rounds >= 2


def test_bad_input_is_refused():
    with pytest.raises(LmcError, match="square"):
        linear_assignment(torch.zeros(2, 3))
    with pytest.raises(LmcError, match="solver"):
        solve_assignment(torch.zeros(2, 2), solver="auction")
    assert linear_assignment(torch.zeros(0, 0)).numel() == 0
