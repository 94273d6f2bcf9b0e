"""Peak memory and time of the streamed layerwise analysis of a 16384-wide MLP layer.

Model: MLP 784 -> 16384 -> 10 (``--depth 1``; ``--depth 2`` adds a 16384 x 16384 layer), random
weights (seeds 0 and 1), on 10000 Fashion-MNIST-shaped test examples (the real test set when
``lmc.data`` finds it, else seeded synthetic images of that shape). Each case runs in its own
subprocess so its RSS high-water mark (``resource.getrusage(RUSAGE_SELF).ru_maxrss``) is its own:

- ``setup``: import, models, data and one forward batch: the fixed cost;
- ``analyze-N``: the same plus ``lmc.analysis.analyze`` at λ = 0.5 over N examples.

Peak RSS that does not grow from N = 2500 to N = 10000 shows that memory does not grow with the
number of examples. The naive approach (store every activation the statistics need, then
reduce) is computed, not run: examples x width x 4 bytes (float32) x stored tensors, with
9 tensors per wide layer: f and z~ of A, B and θ(λ) (6) and W_A z_B, W_B z_A, W_A z_C (3).

    .venv/bin/python benchmarks/analysis_memory.py [--depth 1] [--device cpu] [--batch-size 256]
        [--examples 10000]

Times are of ``analyze`` alone: wall seconds and CPU seconds (user + system, all threads; on a
shared machine the wall time includes waiting). With ``--depth 2`` the singular values (a
16384 x 16384 SVD) are skipped.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

WIDTH = 16384
EXAMPLES = 10000
NAIVE_TENSORS = 9


def _data(n: int):
    import torch

    try:
        from lmc.data import load

        x = load("fashion-mnist").x_test
        source = "fashion-mnist test set"
    except Exception:  # noqa: BLE001 - any failure to find the files: use synthetic data
        x = torch.randn(EXAMPLES, 1, 28, 28, generator=torch.Generator().manual_seed(0))
        source = "synthetic N(0, 1) images (Fashion-MNIST files not found)"
    return x[:n], source


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _case(name: str, n: int, depth: int, device: str, batch_size: int) -> dict:
    import torch

    from lmc.analysis import analyze
    from lmc.models import build

    options = dict(input_size=784, width=WIDTH, depth=depth, num_classes=10)
    a = build("mlp", seed=0, **options).to(device)
    b = build("mlp", seed=1, **options).to(device)
    x, source = _data(n)
    x = x.to(device)
    with torch.no_grad():
        a(x[:batch_size])
    seconds = cpu_seconds = 0.0
    if name.startswith("analyze"):
        start, cpu_start = time.perf_counter(), _cpu_seconds()
        records = analyze(a, b, x, 0.5, batch_size=batch_size, spectra=(depth == 1))
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        cpu_seconds = _cpu_seconds() - cpu_start
        assert records.records[0]["n_examples"] == n
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB (Linux)
    out = {
        "case": name,
        "examples": n,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "peak_rss_mib": peak,
        "data": source,
        "threads": torch.get_num_threads(),
    }
    if device.startswith("cuda"):
        out["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=1, help="hidden layers of width 16384")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--batch-size", type=int, default=256, help="analysis batch size")
    parser.add_argument(
        "--examples", type=int, default=EXAMPLES, help="examples of the full case (small: 1/4)"
    )
    parser.add_argument("--case", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        result = _case(args.case, args.examples, args.depth, args.device, args.batch_size)
        print(json.dumps(result))
        return

    full, small = args.examples, args.examples // 4
    cases = [("setup", full), (f"analyze-{small}", small), (f"analyze-{full}", full)]
    results = []
    for name, n in cases:
        cmd = [
            sys.executable,
            __file__,
            "--case",
            name,
            "--examples",
            str(n),
            "--depth",
            str(args.depth),
            "--device",
            args.device,
            "--batch-size",
            str(args.batch_size),
        ]
        line = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(line.strip().splitlines()[-1]))

    print(
        f"MLP 784 -> {WIDTH} x {args.depth} -> 10, lam = 0.5, batch {args.batch_size}, "
        f"device {args.device}, {results[0]['threads']} torch threads"
    )
    print(f"data: {results[0]['data']}")
    print(f"{'case':>15} {'examples':>9} {'wall s':>9} {'CPU s':>9} {'peak RSS MiB':>13}")
    for r in results:
        print(
            f"{r['case']:>15} {r['examples']:>9} {r['seconds']:>9.1f} {r['cpu_seconds']:>9.1f} "
            f"{r['peak_rss_mib']:>13.0f}"
            + (f"  (GPU peak {r['peak_gpu_mib']:.0f} MiB)" if "peak_gpu_mib" in r else "")
        )
    setup_mib, small_mib, full_mib = (r["peak_rss_mib"] for r in results)
    naive = EXAMPLES * WIDTH * 4 * NAIVE_TENSORS * args.depth / 2**20
    print(
        f"analysis memory above setup: {small_mib - setup_mib:.0f} MiB at {small} examples, "
        f"{full_mib - setup_mib:.0f} MiB at {full} "
        f"(ratio {(full_mib - setup_mib) / max(small_mib - setup_mib, 1):.2f})"
    )
    print(
        f"naive store-all-activations: {EXAMPLES} x {WIDTH} x 4 B x {NAIVE_TENSORS} tensors "
        f"x {args.depth} layer(s) = {naive:.0f} MiB ({naive / 1024:.1f} GiB) on top of setup"
    )
    print(
        f"naive at {EXAMPLES} examples / streamed (above setup, which does not grow with the "
        f"examples): {naive / max(full_mib - setup_mib, 1):.1f}x"
    )


if __name__ == "__main__":
    main()
