"""The linear assignment solver that every matching method calls."""

from __future__ import annotations

import torch
from scipy.optimize import linear_sum_assignment


def linear_assignment(similarity: torch.Tensor) -> torch.Tensor:
    """The permutation ``p`` maximising ``Σ_i similarity[i, p[i]]`` (an int64 CPU tensor).

    Rows are A's units, columns B's; ``p[i]`` is the unit of B matched to unit ``i`` of A, so
    applying ``p`` to B puts B's units in A's order. Solved exactly by SciPy's
    ``linear_sum_assignment`` (a shortest-augmenting-path Jonker–Volgenant variant) in float64;
    the benchmark ``benchmarks/weight_matching.py`` compares it with the ``lap`` package.
    Non-finite entries are an error.
    """
    s = similarity.detach().to("cpu", torch.float64).numpy()
    if s.shape[0] != s.shape[1]:
        raise ValueError(f"similarity must be square, got {tuple(s.shape)}")
    if s.size == 0:
        return torch.zeros(0, dtype=torch.long)
    rows, cols = linear_sum_assignment(s, maximize=True)
    out = torch.empty(s.shape[0], dtype=torch.long)
    out[torch.from_numpy(rows).long()] = torch.from_numpy(cols).long()
    return out
