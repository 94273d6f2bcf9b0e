"""The long real-data training check: a width-512 depth-3 MLP on Fashion-MNIST reaches 87 %.

Trains ``make_config("fashion-mnist", "mlp", {"width": 512, "depth": 3}, epochs=10)`` (lmc's
default recipe otherwise: SGD, cosine schedule, seeds 0) on the whole training split through
``lmc.train.train_run`` in a temporary run store (at PyTorch's default thread count, as the
old test ran, unless ``--threads``), and prints the final test accuracy, the wall time and
whether it meets ``--threshold`` (exit status 1 if not). This was a test until
the suite was made fast; the suite keeps a small-scale version of it
(``tests/train/test_training.py::test_fashion_mnist_small_mlp_learns_the_real_data``). It needs
the Fashion-MNIST files (Debian's dataset-fashion-mnist or ``lmc data download``). About two
minutes on two CPU cores.

    .venv/bin/python benchmarks/fashion_mnist_accuracy.py [--width 512] [--epochs 10]
        [--threshold 0.87] [--threads N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

from lmc.data import load
from lmc.store import RunStore
from lmc.train import make_config, train_run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--threshold", type=float, default=0.87)
    parser.add_argument("--threads", type=int, default=None,
                        help="PyTorch threads (default: PyTorch's, the core count)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    data = load("fashion-mnist")
    config = make_config(
        "fashion-mnist",
        "mlp",
        {"width": args.width, "depth": 3},
        data=data,
        epochs=args.epochs,
    )
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        run, _ = train_run(config, store=RunStore(Path(folder)), data=data)
        accuracy = run.metrics["final_test_accuracy"]
    seconds = time.perf_counter() - start
    ok = accuracy >= args.threshold
    print(f"fashion-mnist mlp width {args.width} depth 3, epochs {args.epochs}: "
          f"test accuracy {accuracy:.4f} in {seconds:.0f} s")  # fmt: skip
    print(f"reaches {args.threshold:.2%}: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
