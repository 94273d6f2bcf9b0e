"""Time to evaluate an 11-point path for a wide Fashion-MNIST MLP, batched vs loop.

Workload: two MLPs (784 -> 2048 -> 2048 -> 2048 -> 10, ReLU, no BatchNorm) and the 10000-image
Fashion-MNIST test split (``lmc.data.load("fashion-mnist")`` when its files are found, e.g. the
Debian ones under /usr/share/datasets/fashion-mnist; otherwise synthetic 784-dim data of the
same size). ``lmc.metrics.evaluate_path`` is timed with ``method="batched"`` (the default:
stacked weights, one batched forward per batch of examples; for this MLP the chain path, layer
by layer one ``addmm`` per model into reused buffers with in-place ReLU) and
``method="loop"`` (one plain forward pass per lambda), in one run, alternating, ``--repeats``
times; ``--sweep`` adds other batch sizes and the generic ``torch.vmap`` path (``fast=False``).

FLOPs: 2 * in * out per example per Linear layer, times 11 models (the two endpoints and the
nine interior points: every point is one forward) times the number of examples. The reference
rate is the workload's own matrix products run alone (:func:`mm_rate`: the four layer shapes as
plain ``torch.mm`` for the same number of rows as one product of the evaluation), so the ratio
is the share of the machine's matmul rate the evaluation keeps after biases, activations,
interpolation, metrics and bookkeeping. On a shared machine the load changes from second to
second, so every timed evaluation is bracketed by two runs of the reference (each a sixth of
the evaluation's wall time) and its ratio is taken against their mean; the table shows medians
over ``--repeats`` and the range.

    .venv/bin/python benchmarks/path_eval.py [--examples N] [--repeats R] [--sweep]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

import lmc.models
from lmc.metrics import auto_batch_size, evaluate_path

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
    """GFLOP/s of the workload's own matrix products run alone, for about ``seconds``.

    One iteration is the MLP's four products for ``rows`` examples as plain float32 ``torch.mm``
    into preallocated outputs: (rows x 784) @ (784 x 2048), twice (rows x 2048) @ (2048 x 2048),
    and (rows x 2048) @ (2048 x 10): the same shapes and FLOPs as one forward, with no bias,
    activation, allocation or bookkeeping. Timed over a wall time similar to the evaluation it
    is compared with, so that both see the same kind of load on a shared machine.
    """
    g = torch.Generator().manual_seed(1)
    dims = [INPUT] + [WIDTH] * DEPTH + [CLASSES]
    inputs = [torch.randn(rows, d, generator=g) for d in dims[:-1]]
    weights = [torch.randn(i, o, generator=g) for i, o in zip(dims[:-1], dims[1:])]
    outs = [torch.empty(rows, o) for o in dims[1:]]

    def forward() -> None:
        for a, w, out in zip(inputs, weights, outs):
            torch.mm(a, w, out=out)

    forward()
    calls, t = 0, time.perf_counter()
    while True:
        forward()
        calls += 1
        elapsed = time.perf_counter() - t
        if elapsed >= seconds:
            break
    return rows * flops_per_example() * calls / elapsed / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=10000, help="examples evaluated")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats (medians shown)")
    parser.add_argument(
        "--sweep", action="store_true", help="also try other batch sizes and the vmap path"
    )
    args = parser.parse_args()

    x, y, source = load_split(args.examples)
    a = lmc.models.build("mlp", seed=0, input_size=INPUT, width=WIDTH, depth=DEPTH).eval()
    b = lmc.models.build("mlp", seed=1, input_size=INPUT, width=WIDTH, depth=DEPTH).eval()
    n = len(y)
    interior = POINTS - 2
    # (label, evaluate_path options, rows per matmul of the hot layers); no batch_size = default
    cpu = torch.device("cpu")
    auto_batched, auto_loop = auto_batch_size(a, x, interior, cpu), auto_batch_size(a, x, 1, cpu)
    configs = [
        ("batched", {"method": "batched"}, auto_batched),
        ("loop", {"method": "loop"}, auto_loop),
    ]
    if args.sweep:
        configs += [("batched/vmap", {"method": "batched", "fast": False}, auto_batched)]
        configs += [("batched", {"method": "batched", "batch_size": r}, r) for r in (512, 4096)]
        configs += [("loop", {"method": "loop", "batch_size": r}, r) for r in (1024, 4096, n)]
    print(
        f"{source}: {n} examples; MLP {INPUT}-{WIDTH}x{DEPTH}-{CLASSES}; {POINTS} points; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    default = evaluate_path(a, b, x[:256], y[:256], 3)  # warm-up (imports, vmap)
    total_gflop = POINTS * n * flops_per_example() / 1e9
    seconds: dict[int, list[float]] = {i: [] for i in range(len(configs))}
    refs: dict[int, list[float]] = {i: [] for i in range(len(configs))}
    ref_time = 3.0
    for r in range(args.repeats):
        order = list(range(len(configs)))
        if r % 2:  # alternate the order: neither method always runs first
            order[:2] = [1, 0]
        for i in order:
            _, options, rows = configs[i]
            # the matmul reference brackets the evaluation, so both see the same load
            before = mm_rate(rows, ref_time)
            t = time.perf_counter()
            res = evaluate_path(a, b, x, y, POINTS, **options)
            dt = time.perf_counter() - t
            after = mm_rate(rows, ref_time)
            assert res.method == options["method"]
            seconds[i].append(dt)
            refs[i].append((before + after) / 2)
            ref_time = max(2.0, dt / 6)
    print(
        f"\n{'method':12} {'batch':>6} {'rows/mm':>8} {'seconds':>8} {'GFLOP/s':>8} "
        f"{'mm GFLOP/s':>10} {'% of mm':>8} {'range':>13}"
    )
    med = statistics.median
    for i, (name, options, rows) in enumerate(configs):
        ratios = [total_gflop / t / r for t, r in zip(seconds[i], refs[i])]
        label = str(options.get("batch_size", "auto"))
        print(
            f"{name:12} {label:>6} {rows:8d} {med(seconds[i]):8.2f} "
            f"{med([total_gflop / t for t in seconds[i]]):8.1f} {med(refs[i]):10.1f} "
            f"{100 * med(ratios):7.1f}% {100 * min(ratios):5.1f}-{100 * max(ratios):5.1f}%"
        )
    speedup = med([t1 / t0 for t0, t1 in zip(seconds[0], seconds[1])])
    print(
        f"\nbatched is {speedup:.2f}x the speed of the loop (median of paired repeats); "
        f"evaluate_path's default here: {default.method!r}; {total_gflop:.0f} GFLOP per path; "
        f"medians of {args.repeats} repeats, each bracketed by the matmul reference"
    )


if __name__ == "__main__":
    main()
