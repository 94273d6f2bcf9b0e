"""Path evaluation of attention models: ``torch.vmap`` with each attention kernel, against the loop.

``torch.vmap`` has no batching rule for CPU ``scaled_dot_product_attention`` (its flash kernel),
so the batched engine falls back to a slow per-example loop inside it. This times, in one run,
an 11-point path (``lmc.metrics.evaluate_path``) of two zoo models on random data:

- ``loop``: one plain forward per λ (``method="loop"``);
- ``vmap-default``: the batched engine as PyTorch picks the attention kernel (the flash kernel
  on CPU, which vmap runs through its slow fallback);
- ``vmap-math``: the batched engine with SDPA's math kernel forced
  (``torch.nn.attention.sdpa_kernel(SDPBackend.MATH)``: matmul and softmax, which vmap batches).

and checks that the three give the same losses (to 1e-4). Ratios are against ``vmap-default``.

    .venv/bin/python benchmarks/attention_path_eval.py [--examples N] [--repeats R]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import lmc.models
from lmc.metrics import evaluate_path

MODELS = {
    "vit-256": dict(
        name="vit", width=256, depth=4, heads=4, patch=4, in_channels=1, image_size=28,
        num_classes=10,
    ),
    "gpt-256": dict(name="gpt", width=256, depth=2, heads=4, vocab=100, context=64),
}  # fmt: skip


def data(spec: dict, examples: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    if spec["name"] == "gpt":
        x = torch.randint(0, spec["vocab"], (examples, spec["context"]), generator=g)
        return x, torch.roll(x, -1, dims=1)
    x = torch.randn(examples, 1, 28, 28, generator=g)
    return x, torch.randint(0, 10, (examples,), generator=g)


def timed(a, b, x, y, method: str) -> tuple[float, list[float]]:
    start = time.perf_counter()
    task = "next-token" if y.dim() == 2 else "classification"
    result = evaluate_path(a, b, x, y, 11, method=method, task=task)
    return time.perf_counter() - start, list(result.loss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{args.examples} examples, 11 points, median of {args.repeats}")  # fmt: skip
    for label, spec in MODELS.items():
        options = {k: v for k, v in spec.items() if k != "name"}
        a = lmc.models.build(spec["name"], seed=1, **options).eval()
        b = lmc.models.build(spec["name"], seed=2, **options).eval()
        x, y = data(spec, args.examples)
        ways = {
            "loop": (contextlib.nullcontext, "loop"),
            "vmap-default": (contextlib.nullcontext, "batched"),
            "vmap-math": (lambda: sdpa_kernel(SDPBackend.MATH), "batched"),
        }
        seconds: dict[str, list[float]] = {k: [] for k in ways}
        losses: dict[str, list[float]] = {}
        for _ in range(args.repeats):
            for way, (context, method) in ways.items():
                with context():
                    s, loss = timed(a, b, x, y, method)
                seconds[way].append(s)
                losses[way] = loss
        base = statistics.median(seconds["vmap-default"])
        for way in ways:
            med = statistics.median(seconds[way])
            gap = max(abs(p - q) for p, q in zip(losses[way], losses["loop"]))
            print(f"{label:8} {way:13} {med:8.2f} s  {base / med:6.2f}x vmap-default  "
                  f"max |loss - loop's| {gap:.1e}")  # fmt: skip
            assert gap < 1e-4, (label, way, gap)


if __name__ == "__main__":
    main()
