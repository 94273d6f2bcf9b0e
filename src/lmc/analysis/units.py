"""Summaries of per-unit second moments m_i = √E[z~_i²] (the width paper's low-rank evidence).

- A unit is *near zero* when m_i < ``near_zero`` × max_j m_j (default 1e-2: a unit whose typical
  pre-activation is 40 dB below the layer's largest). ``near_zero_fraction`` = their share.
- A model's *large units* are the fewest units that hold ``energy`` (default 90%) of the layer's
  total second moment Σ_i m_i² = E‖z~‖², taken largest first. ``large_unit_fraction`` = their
  share of the units, ``large_unit_overlap`` = the Jaccard index |S_A ∩ S_B| / |S_A ∪ S_B| of
  the two models' large-unit sets, index by index (the units that a merge adds together):
  1 for a model against itself, 0 for models on disjoint units, about f²/(2f − f²) for two
  independent random sets each holding a fraction f of the units.
"""

from __future__ import annotations

import math

import numpy as np

NEAR_ZERO = 1e-2
LARGE_ENERGY = 0.9


def near_zero_fraction(moments: np.ndarray, near_zero: float = NEAR_ZERO) -> float:
    """Fraction of units with m_i < near_zero × max m; NaN for an empty or all-zero layer."""
    if moments.size == 0 or moments.max() <= 0:
        return math.nan
    return float((moments < near_zero * moments.max()).mean())


def large_units(moments: np.ndarray, energy: float = LARGE_ENERGY) -> np.ndarray:
    """Boolean mask of the fewest units holding ``energy`` of Σ m_i² (largest first)."""
    mask = np.zeros(moments.shape, dtype=bool)
    power = moments.astype(np.float64) ** 2
    total = power.sum()
    if total <= 0:
        return mask
    order = np.argsort(-power, kind="stable")
    cumulative = np.cumsum(power[order])
    count = int(np.searchsorted(cumulative, energy * total * (1 - 1e-12))) + 1
    mask[order[: min(count, moments.size)]] = True
    return mask


def large_unit_fraction(moments: np.ndarray, energy: float = LARGE_ENERGY) -> float:
    return float(large_units(moments, energy).mean()) if moments.size else math.nan


def large_unit_overlap(
    moments_a: np.ndarray, moments_b: np.ndarray, energy: float = LARGE_ENERGY
) -> float:
    """Jaccard index of the two models' large-unit sets (same unit index = same unit)."""
    a, b = large_units(moments_a, energy), large_units(moments_b, energy)
    union = (a | b).sum()
    return float((a & b).sum() / union) if union else math.nan


def unit_summary(
    moments_a: np.ndarray,
    moments_b: np.ndarray,
    *,
    near_zero: float = NEAR_ZERO,
    energy: float = LARGE_ENERGY,
) -> dict[str, float]:
    """The record fields derived from the two models' per-unit moments."""
    return {
        "near_zero_fraction_a": near_zero_fraction(moments_a, near_zero),
        "near_zero_fraction_b": near_zero_fraction(moments_b, near_zero),
        "large_unit_fraction_a": large_unit_fraction(moments_a, energy),
        "large_unit_fraction_b": large_unit_fraction(moments_b, energy),
        "large_unit_overlap": large_unit_overlap(moments_a, moments_b, energy),
    }
