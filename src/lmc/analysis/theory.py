"""Theorem 5.4 of the width paper: ReLU is nearly additive on independent Gaussian vectors.

For u, v ~ N(0, I_d), cos(σ(u + v), σ(u) + σ(v)) → (3/4 + 1/π) / √(1 + 1/π) ≈ 0.9304 in
probability as d grows (σ = ReLU). Derivation of the limit: E σ(u+v)² = 1 (u + v ~ N(0, 2)),
E(σ(u) + σ(v))² = 1 + 1/π and E σ(u+v)(σ(u) + σ(v)) = 3/4 + 1/π (the arc-cosine kernel at
correlation 1/√2). Observed weak-additivity cosines above this point to more than dimension:
the low-rank structure of trained weights.
"""

from __future__ import annotations

import math

import torch

from .accumulators import row_cosines

#: Theorem 5.4's limit of cos(σ(u + v), σ(u) + σ(v)), (3/4 + 1/π) / √(1 + 1/π) ≈ 0.9304.
GAUSSIAN_RELU_LIMIT = (3 / 4 + 1 / math.pi) / math.sqrt(1 + 1 / math.pi)

_CHUNK_ELEMENTS = 1 << 22


def gaussian_relu_cosine(dim: int, samples: int = 1000, seed: int = 0) -> float:
    """Monte-Carlo E cos(σ(u + v), σ(u) + σ(v)) for u, v ~ N(0, I_dim), σ = ReLU, in float64.

    ``samples`` independent pairs drawn from ``torch.Generator().manual_seed(seed)`` (CPU), in
    chunks so memory stays below ~64 MiB whatever ``dim``. Compare with ``GAUSSIAN_RELU_LIMIT``.
    """
    if dim < 1 or samples < 1:
        raise ValueError(f"dim and samples must be positive, got dim={dim}, samples={samples}")
    gen = torch.Generator().manual_seed(int(seed))
    chunk = max(1, _CHUNK_ELEMENTS // dim)
    total = 0.0
    done = 0
    while done < samples:
        n = min(chunk, samples - done)
        u = torch.randn(n, dim, generator=gen, dtype=torch.float64)
        v = torch.randn(n, dim, generator=gen, dtype=torch.float64)
        total += float(row_cosines(torch.relu(u + v), torch.relu(u) + torch.relu(v)).sum())
        done += n
    return total / samples
