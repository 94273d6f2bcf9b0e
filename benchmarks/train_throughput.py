"""Training throughput of lmc's loop against the machine's matmul rate, measured in one run.

For MLPs (depth 3) of widths 512 and 2048 on Fashion-MNIST (synthetic data of the same shape
when the files are absent), it times whole epochs of ``lmc.train.fit`` (shuffling, indexing,
forward, backward, fused SGD step, per-epoch test evaluation excluded) and reports samples/s and
achieved GFLOP/s. FLOPs are counted exactly for the Linear layers: forward 2*in*out per example
and layer, backward 2*in*out for the weight gradient plus 2*in*out for the input gradient
(except the first layer, whose input needs none). The reference rate is a float32 matmul of
the workload's largest shape, (batch x width) @ (width x width), measured just before and
after the timed epochs (the higher of the two is used, so the ratio errs low on a busy machine).

    python benchmarks/train_throughput.py [--batch-size 128] [--widths 512,2048] [--epochs 1]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from _common import matmul_gflops

from lmc.data import load
from lmc.models import build
from lmc.train import TrainSettings, fit


def training_flops_per_example(model: torch.nn.Module) -> int:
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    flops = 0
    for i, layer in enumerate(linears):
        mac = layer.in_features * layer.out_features
        flops += 2 * mac + 2 * mac + (2 * mac if i > 0 else 0)
    return flops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--widths", default="512,2048")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    if Path("/usr/share/datasets/fashion-mnist").exists():
        data = load("fashion-mnist", device=args.device)
    else:
        data = load(
            "synthetic",
            input_shape=(1, 28, 28),
            train_size=60000,
            test_size=10000,
            device=args.device,
        )
    print(
        f"data: {data.name}, {len(data.x_train)} training examples; device {args.device}; "
        f"torch threads {torch.get_num_threads()}"
    )
    print(f"{'width':>6} {'samples/s':>10} {'GFLOP/s':>8} {'matmul GFLOP/s':>15} {'ratio':>6}")
    for width in (int(w) for w in args.widths.split(",")):
        model = build("mlp", seed=0, input_size=784, width=width, depth=3, num_classes=10)
        settings = TrainSettings(epochs=args.epochs, batch_size=args.batch_size)
        fit(
            model,
            data,
            TrainSettings(epochs=1, batch_size=args.batch_size),
            device=args.device,
            stop_epoch=1,
            evaluate_test=False,
        )  # warm-up
        before = matmul_gflops(args.batch_size, width, width, device=args.device)
        start = time.perf_counter()
        fit(model, data, settings, device=args.device, evaluate_test=False)
        seconds = time.perf_counter() - start
        examples = (len(data.x_train) // args.batch_size) * args.batch_size * args.epochs
        gflops = training_flops_per_example(model) * examples / seconds / 1e9
        after = matmul_gflops(args.batch_size, width, width, device=args.device)
        reference = max(before, after)  # the better of the two: a conservative ratio
        print(
            f"{width:>6} {examples / seconds:>10.0f} {gflops:>8.1f} {reference:>15.1f} "
            f"{gflops / reference:>6.2f}"
        )


if __name__ == "__main__":
    main()
