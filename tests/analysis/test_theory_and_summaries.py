"""Theorem 5.4's Monte-Carlo check, spectra and the per-unit moment summaries."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lmc.analysis import (
    GAUSSIAN_RELU_LIMIT,
    effective_rank,
    gaussian_relu_cosine,
    large_unit_overlap,
    near_zero_fraction,
    singular_values,
    stable_rank,
)
from lmc.analysis.accumulators import row_cosines
from lmc.analysis.units import large_unit_fraction, large_units


def test_gaussian_relu_limit_value():
    assert GAUSSIAN_RELU_LIMIT == pytest.approx(0.9304, abs=1e-4)
    assert GAUSSIAN_RELU_LIMIT == (0.75 + 1 / math.pi) / math.sqrt(1 + 1 / math.pi)


def test_gaussian_relu_cosine_approaches_the_limit():
    high = gaussian_relu_cosine(4096, samples=1000, seed=0)
    assert abs(high - GAUSSIAN_RELU_LIMIT) < 0.01
    low = gaussian_relu_cosine(4, samples=4000, seed=0)
    assert low < GAUSSIAN_RELU_LIMIT - 0.03  # far from the limit in low dimension
    assert gaussian_relu_cosine(64, seed=3) == gaussian_relu_cosine(64, seed=3)
    assert gaussian_relu_cosine(64, seed=3) != gaussian_relu_cosine(64, seed=4)


def test_ranks_of_known_spectra():
    assert stable_rank(np.ones(5)) == pytest.approx(5)
    assert effective_rank(np.ones(5)) == pytest.approx(5)
    assert stable_rank(np.array([3.0, 0, 0])) == pytest.approx(1)
    assert effective_rank(np.array([3.0, 0, 0])) == pytest.approx(1)
    assert effective_rank(np.array([2.0, 1.0])) == pytest.approx(
        math.exp(-(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3)))
    )
    assert math.isnan(stable_rank(np.zeros(3)))


def test_singular_values_of_conv_weight():
    w = torch.zeros(2, 3, 2, 2)
    w[0, 0, 0, 0] = 3.0
    w[1, 2, 1, 1] = -4.0
    assert singular_values(w) == pytest.approx([4.0, 3.0])


def test_unit_summaries():
    m = np.array([10.0, 5.0, 0.05, 0.0, 1.0])
    assert near_zero_fraction(m, 1e-2) == pytest.approx(2 / 5)
    # energies 100, 25, 1: 90% of 126.0025 needs the two largest units
    assert large_units(m, 0.9).tolist() == [True, True, False, False, False]
    assert large_unit_fraction(m, 0.9) == pytest.approx(2 / 5)
    other = np.array([0.0, 5.0, 0.0, 10.0, 0.0])
    assert large_unit_overlap(m, other) == pytest.approx(1 / 3)
    assert large_unit_overlap(m, m) == 1.0


def test_row_cosine_conventions():
    u = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0], [2.0, 2.0]], dtype=torch.float64)
    v = torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [-1.0, -1.0]], dtype=torch.float64)
    assert row_cosines(u, v).tolist() == pytest.approx([math.sqrt(0.5), 1.0, 0.0, -1.0])
