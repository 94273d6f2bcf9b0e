"""Spectra of weight matrices: singular values, stable rank and effective rank.

A Conv weight (out, in, *kernel) is read as the matrix (out, in · prod(kernel)), the map from
one input patch to one output position. Singular values are computed in float64 when the
smaller side is at most ``FLOAT64_LIMIT`` and in the weight's own precision (on its device)
beyond, where float64 would cost minutes and gigabytes; they come back descending, float64.
"""

from __future__ import annotations

import math

import numpy as np
import torch

FLOAT64_LIMIT = 4096


def weight_matrix(weight: torch.Tensor) -> torch.Tensor:
    """(out, in, *kernel) -> (out, in * prod(kernel)); a Linear weight is returned as is."""
    return weight.detach().reshape(weight.shape[0], -1)


def svd_ready(matrix: torch.Tensor) -> torch.Tensor:
    """``matrix`` in the precision its SVD is taken in: float64 on the CPU up to
    ``FLOAT64_LIMIT`` on the smaller side (and always on MPS, which has no float64 SVD), else
    the matrix's own precision on its device."""
    if min(matrix.shape) <= FLOAT64_LIMIT or matrix.device.type == "mps":
        return matrix.to("cpu", torch.float64)
    return matrix


@torch.no_grad()
def singular_values(weight: torch.Tensor) -> np.ndarray:
    """Singular values of ``weight_matrix(weight)``, descending, as float64 numpy."""
    return torch.linalg.svdvals(svd_ready(weight_matrix(weight))).to("cpu", torch.float64).numpy()


def stable_rank(sv: np.ndarray) -> float:
    """‖W‖_F² / ‖W‖_2² = Σσ_i² / σ_max² (1 for rank one, up to the rank); NaN for W = 0."""
    if sv.size == 0 or sv.max() <= 0:
        return math.nan
    return float((sv**2).sum() / sv.max() ** 2)


def effective_rank(sv: np.ndarray) -> float:
    """Roy & Vetterli's effective rank exp(−Σ p_i log p_i), p_i = σ_i / Σσ_j; NaN for W = 0."""
    total = sv.sum() if sv.size else 0.0
    if total <= 0:
        return math.nan
    p = sv[sv > 0] / total
    return float(math.exp(-(p * np.log(p)).sum()))
