"""The assignment solvers of lmc.perm.lap reach SciPy's optimum exactly, on any matrix."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import linear_sum_assignment

from lmc.config import LmcError
from lmc.perm.lap import linear_assignment, solve_assignment


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


def test_both_solvers_reach_scipys_objective_on_1000_matrices():
    rng = np.random.default_rng(0)
    certified = 0
    for i in range(1000):
        s = _matrix(rng, i)
        rows, cols = linear_sum_assignment(s, maximize=True)
        best = float(s[rows, cols].sum())
        st = torch.from_numpy(s)
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
