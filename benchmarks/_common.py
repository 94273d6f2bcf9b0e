"""Shared helpers for the benchmark scripts: timing and the machine's matmul rate."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def best_time(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    """The fastest of ``repeats`` timed calls of ``fn`` (seconds), after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return min(times)


def matmul_gflops(m: int, k: int, n: int, device: str = "cpu", repeats: int = 20) -> float:
    """Measured GFLOP/s of a float32 (m x k) @ (k x n) matmul on ``device``."""
    a = torch.randn(m, k, device=device)
    b = torch.randn(k, n, device=device)
    out = torch.empty(m, n, device=device)

    def run():
        for _ in range(repeats):
            torch.mm(a, b, out=out)

    seconds = best_time(run, repeats=3)
    return 2 * m * k * n * repeats / seconds / 1e9
