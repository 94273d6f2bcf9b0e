"""Time to evaluate an 11-point path for a wide Fashion-MNIST MLP, batched vs loop.

Workload: two MLPs (784 -> 2048 -> 2048 -> 2048 -> 10, ReLU, no BatchNorm) and the 10000-image
Fashion-MNIST test split (``lmc.data.load("fashion-mnist")`` when its files are found, e.g. the
Debian ones under /usr/share/datasets/fashion-mnist; otherwise synthetic 784-dim data of the
same size). ``lmc.metrics.evaluate_path`` is timed with ``method="batched"`` (stacked weights,
one vmapped forward per batch) and ``method="loop"`` (one plain forward pass per lambda), in
one run, interleaved, best of ``--repeats``.

FLOPs: 2 * in * out per example per Linear layer, times 11 models (the two endpoints and the
nine interior points: every point is one forward) times the number of examples. The reference
rate is ``torch.mm`` of a (rows x 2048) by (2048 x 2048) float32 product, with rows equal to
the rows one matmul of the evaluation sees, run right after each evaluation for a third of its
wall time (best of ``--repeats``), so that both see the same load on a shared machine.

    .venv/bin/python benchmarks/path_eval.py [--examples N] [--repeats R] [--sweep]
"""

from __future__ import annotations

import argparse
import os
import time

import torch

import lmc.models
from lmc.metrics import evaluate_path

WIDTH, DEPTH, INPUT, CLASSES, POINTS = 2048, 3, 784, 10, 11


def load_split(examples: int) -> tuple[torch.Tensor, torch.Tensor, str]:
    if os.path.isdir("/usr/share/datasets/fashion-mnist") or os.environ.get("LMC_DATA"):
        try:
            import lmc.data

            ds = lmc.data.load("fashion-mnist")
            return ds.x_test[:examples].flatten(1), ds.y_test[:examples], "fashion-mnist test"
        except Exception as exc:  # noqa: BLE001 - any failure: fall back to synthetic data
            print(f"(fashion-mnist unavailable: {exc}; using synthetic data)")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(examples, INPUT, generator=g)
    y = torch.randint(0, CLASSES, (examples,), generator=g)
    return x, y, "synthetic 784-dim"


def flops_per_example() -> int:
    dims = [INPUT] + [WIDTH] * DEPTH + [CLASSES]
    return sum(2 * a * b for a, b in zip(dims[:-1], dims[1:]))


def mm_rate(rows: int, seconds: float) -> float:
    """GFLOP/s of torch.mm (rows x 2048) @ (2048 x 2048) in float32, run for about ``seconds``.

    Timed over a similar wall time as the evaluation it is compared with, so that both see the
    same kind of load on a shared machine.
    """
    g = torch.Generator().manual_seed(1)
    a = torch.randn(rows, WIDTH, generator=g)
    w = torch.randn(WIDTH, WIDTH, generator=g)
    out = torch.empty(rows, WIDTH)
    torch.mm(a, w, out=out)
    calls, t = 0, time.perf_counter()
    while True:
        torch.mm(a, w, out=out)
        calls += 1
        elapsed = time.perf_counter() - t
        if elapsed >= seconds:
            break
    return 2 * rows * WIDTH * WIDTH * calls / elapsed / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=10000, help="examples evaluated")
    parser.add_argument("--repeats", type=int, default=2, help="timed repeats (best is kept)")
    parser.add_argument("--sweep", action="store_true", help="also try other batch sizes")
    args = parser.parse_args()

    x, y, source = load_split(args.examples)
    a = lmc.models.build("mlp", seed=0, input_size=INPUT, width=WIDTH, depth=DEPTH).eval()
    b = lmc.models.build("mlp", seed=1, input_size=INPUT, width=WIDTH, depth=DEPTH).eval()
    n = len(y)
    interior = POINTS - 2
    # (method, batch_size passed, rows per matmul of the hot layers)
    configs = [("batched", None, 8192 // interior), ("loop", None, 1024)]
    if args.sweep:
        configs += [("batched", 256, 256), ("batched", 2048, 2048), ("loop", 2048, 2048),
                    ("loop", 4096, 4096), ("loop", n, n)]  # fmt: skip
    print(
        f"{source}: {n} examples; MLP {INPUT}-{WIDTH}x{DEPTH}-{CLASSES}; {POINTS} points; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    evaluate_path(a, b, x[:256], y[:256], 3, method="batched")  # warm-up (imports, vmap)
    total_gflop = POINTS * n * flops_per_example() / 1e9
    best: dict[int, float] = {}
    rates: dict[int, float] = {}
    for _ in range(args.repeats):
        for i, (method, bs, rows) in enumerate(configs):
            t = time.perf_counter()
            res = evaluate_path(a, b, x, y, POINTS, method=method, batch_size=bs)
            dt = time.perf_counter() - t
            assert res.method == method
            best[i] = min(best.get(i, float("inf")), dt)
            rates[i] = max(rates.get(i, 0.0), mm_rate(rows, dt / 3))
    print(
        f"\n{'method':8} {'batch':>6} {'rows/mm':>8} {'seconds':>8} {'GFLOP/s':>8} "
        f"{'mm GFLOP/s':>10} {'% of mm':>8}"
    )
    for i, (method, bs, rows) in enumerate(configs):
        rate = total_gflop / best[i]
        ref = rates[i]
        label = "auto" if bs is None else str(bs)
        print(
            f"{method:8} {label:>6} {rows:8d} {best[i]:8.2f} {rate:8.1f} {ref:10.1f} "
            f"{100 * rate / ref:7.1f}%"
        )
    ratio = best[1] / best[0]
    print(
        f"\nbatched (default) is {ratio:.2f}x the speed of the loop "
        f"({total_gflop:.0f} GFLOP per path)"
    )


if __name__ == "__main__":
    main()
