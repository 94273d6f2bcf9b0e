"""Training throughput of lmc's loop in float32 and bfloat16 autocast, measured in one run.

Throughput (the default): for depth-3 MLPs of each width in ``--widths`` it times
``lmc.train.fit`` (shuffling, indexing, forward, backward, fused SGD step; no test evaluation)
over ``--steps`` steps of batch ``--batch-size`` on random Fashion-MNIST-shaped data, with
``precision="fp32"`` and ``precision="bf16"`` interleaved (``--repeats`` rounds, the order
alternating each round, the best time of each kept), so both see the same machine load. It
reports steps/s per precision, the bf16/fp32 step-rate ratio and the achieved GFLOP/s. Every
mode's first line names the processor (or GPU), PyTorch's CPU capability and whether bfloat16
is native there (:func:`lmc.config.precision.bf16_support`): the bf16/fp32 ratio is a property
of that hardware (about 2x with AMX, a few hundred times slower on an AVX2-only CPU). FLOPs
are counted exactly for the Linear layers: forward 2*in*out per example and layer, backward
2*in*out for the weight gradient plus 2*in*out for the input gradient (except the first layer,
whose input needs none). Each precision's GFLOP/s is also given as a fraction of a matmul of
the workload's largest shape, (batch x width) @ (width x width), in that dtype, measured just
before and after the width's timed steps (the higher of the two is used, so the fraction errs
low on a busy machine).

On CPU with glibc's allocator, tensors over 32 MB (width 4096: each 4096 x 4096 weight's
gradient, its bfloat16 copy and that copy's gradient) are mmap'd and page-faulted afresh every
step, which costs bf16 more than fp32 (it allocates more of them); running with
``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=4000000000`` in the environment keeps them on the
heap and shows the step rates without that cost.

Language models (``--model gpt``): the same interleaved timing for causal GPTs (``--depth``
blocks, ``--heads`` heads, vocabulary ``--vocab``, ``--context`` tokens per window) of each
embedding width in ``--widths`` on random tokens, reported as tokens/s (batch x context per
step) per precision and their bf16/fp32 ratio; the recipe ``lewc-text-gpt`` trains at these
shapes.

Accuracy (``--accuracy``): trains one MLP of width ``--width`` on Fashion-MNIST for
``--epochs`` epochs with the same seeds in fp32 and bf16 and prints both final test accuracies
(always evaluated in float32) and their difference in points.

    python benchmarks/train_throughput.py [--batch-size 128] [--widths 512,1024,2048,4096]
        [--steps 40] [--repeats 3] [--threads N] [--device cpu]
    python benchmarks/train_throughput.py --model gpt [--widths 64,128,256] [--batch-size 32]
        [--context 64] [--depth 2] [--heads 4] [--vocab 105]
    python benchmarks/train_throughput.py --accuracy [--width 2048] [--epochs 3]
"""

from __future__ import annotations

import argparse
import time

import torch
from _common import best_time

from lmc.config.precision import bf16_support
from lmc.data import Dataset, load
from lmc.data.text import build_text_dataset
from lmc.models import build
from lmc.train import TrainSettings, fit
from lmc.train.settings import TRAINED_PRECISIONS as PRECISIONS

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def training_flops_per_example(model: torch.nn.Module) -> int:
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    flops = 0
    for i, layer in enumerate(linears):
        mac = layer.in_features * layer.out_features
        flops += 2 * mac + 2 * mac + (2 * mac if i > 0 else 0)
    return flops


def hardware(device: str) -> str:
    """The processor (or GPU) the numbers are of, with PyTorch's CPU capability and whether
    bfloat16 is native there, e.g. ``CPU AMD EPYC (AVX2; bfloat16 emulated: ...)``: bf16's
    speed depends on it (native with AVX512-BF16 or AMX, hundreds of times slower without)."""
    return bf16_support(device, measure=False).describe()


def matmul_gflops(m: int, k: int, n: int, dtype: torch.dtype, device: str, repeats: int = 20):
    """Measured GFLOP/s of an (m x k) @ (k x n) matmul in ``dtype`` on ``device``."""
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    out = torch.empty(m, n, device=device, dtype=dtype)

    def run() -> None:
        for _ in range(repeats):
            torch.mm(a, b, out=out)

    return 2 * m * k * n * repeats / best_time(run, repeats=3) / 1e9


def time_fit(
    model: torch.nn.Module, initial: dict, data: Dataset, settings: TrainSettings, device: str
) -> float:
    """Seconds for one epoch of ``fit`` from the ``initial`` weights (reset outside the timing,
    so every repeat trains the same steps)."""
    model.load_state_dict(initial)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    fit(model, data, settings, device=device, evaluate_test=False)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def throughput(args: argparse.Namespace) -> None:
    data = load(
        "synthetic",
        input_shape=(1, 28, 28),
        train_size=args.steps * args.batch_size,
        test_size=args.batch_size,
        device=args.device,
    )
    print(
        f"random Fashion-MNIST-shaped data; depth-3 MLP, batch {args.batch_size}, "
        f"{args.steps} steps x best of {args.repeats} interleaved repeats; device {args.device}; "
        f"torch threads {torch.get_num_threads()}; on {hardware(args.device)}"
    )
    print(
        f"{'width':>6} {'fp32 steps/s':>13} {'bf16 steps/s':>13} {'bf16/fp32':>10} "
        f"{'fp32 GFLOP/s':>13} {'bf16 GFLOP/s':>13} {'fp32/mm':>8} {'bf16/mm':>8}"
    )
    for width in (int(w) for w in args.widths.split(",")):
        model = build("mlp", seed=0, input_size=784, width=width, depth=3, num_classes=10)
        initial = {k: v.clone() for k, v in model.state_dict().items()}
        settings = {
            p: TrainSettings(epochs=1, batch_size=args.batch_size, precision=p) for p in PRECISIONS
        }
        for p in PRECISIONS:  # warm-up: allocator, oneDNN kernel creation
            time_fit(model, initial, data, settings[p], args.device)
        before = {
            p: matmul_gflops(args.batch_size, width, width, DTYPES[p], args.device)
            for p in PRECISIONS
        }
        best = {p: float("inf") for p in PRECISIONS}
        for r in range(args.repeats):
            for p in PRECISIONS if r % 2 == 0 else PRECISIONS[::-1]:
                best[p] = min(best[p], time_fit(model, initial, data, settings[p], args.device))
        after = {
            p: matmul_gflops(args.batch_size, width, width, DTYPES[p], args.device)
            for p in PRECISIONS
        }
        rate = {p: args.steps / best[p] for p in PRECISIONS}
        flops_per_step = training_flops_per_example(model) * args.batch_size
        gflops = {p: rate[p] * flops_per_step / 1e9 for p in PRECISIONS}
        frac = {p: gflops[p] / max(before[p], after[p]) for p in PRECISIONS}
        print(
            f"{width:>6} {rate['fp32']:>13.1f} {rate['bf16']:>13.1f} "
            f"{rate['bf16'] / rate['fp32']:>9.2f}x {gflops['fp32']:>13.1f} "
            f"{gflops['bf16']:>13.1f} {frac['fp32']:>8.2f} {frac['bf16']:>8.2f}"
        )


def random_text(chars: int, vocab: int, seed: int = 0) -> str:
    """``chars`` characters drawn uniformly from a ``vocab``-letter alphabet (seeded)."""
    alphabet = [chr(0x100 + i) for i in range(vocab)]
    gen = torch.Generator().manual_seed(seed)
    return "".join(alphabet[i] for i in torch.randint(vocab, (chars,), generator=gen).tolist())


def gpt_throughput(args: argparse.Namespace) -> None:
    tokens_per_step = args.batch_size * args.context
    train_chars = args.steps * tokens_per_step + args.context + 1
    text = random_text(int(train_chars / 0.8) + 4 * (args.context + 1), args.vocab)
    data = build_text_dataset(
        "random", text, context=args.context, splits=(0.8, 0.1, 0.1), device=args.device
    )
    data.x_train, data.y_train = (
        data.x_train[: args.steps * args.batch_size],
        data.y_train[: args.steps * args.batch_size],
    )
    print(
        f"random tokens (vocab {data.vocab_size}); GPT depth {args.depth}, heads {args.heads}, "
        f"context {args.context}, batch {args.batch_size} ({tokens_per_step} tokens/step), "
        f"AdamW, {args.steps} steps x best of {args.repeats} interleaved repeats; device "
        f"{args.device}; torch threads {torch.get_num_threads()}; on {hardware(args.device)}"
    )
    print(f"{'width':>6} {'fp32 tokens/s':>14} {'bf16 tokens/s':>14} {'bf16/fp32':>10}")
    for width in (int(w) for w in args.widths.split(",")):
        model = build(
            "gpt", seed=0, vocab=data.vocab_size, context=args.context, width=width,
            depth=args.depth, heads=args.heads,
        )  # fmt: skip
        initial = {k: v.clone() for k, v in model.state_dict().items()}
        settings = {
            p: TrainSettings(
                epochs=1, batch_size=args.batch_size, optimizer="adamw", lr=1e-3, precision=p
            )
            for p in PRECISIONS
        }
        for p in PRECISIONS:  # warm-up
            time_fit(model, initial, data, settings[p], args.device)
        best = {p: float("inf") for p in PRECISIONS}
        for r in range(args.repeats):
            for p in PRECISIONS if r % 2 == 0 else PRECISIONS[::-1]:
                best[p] = min(best[p], time_fit(model, initial, data, settings[p], args.device))
        rate = {p: args.steps * tokens_per_step / best[p] for p in PRECISIONS}
        print(
            f"{width:>6} {rate['fp32']:>14.0f} {rate['bf16']:>14.0f} "
            f"{rate['bf16'] / rate['fp32']:>9.2f}x"
        )


def accuracy(args: argparse.Namespace) -> None:
    data = load("fashion-mnist", device=args.device)
    print(
        f"Fashion-MNIST, depth-3 MLP width {args.width}, {args.epochs} epochs, batch "
        f"{args.batch_size}, SGD defaults, seeds 0/0; device {args.device}; "
        f"torch threads {torch.get_num_threads()}; on {hardware(args.device)}"
    )
    results = {}
    for p in PRECISIONS:
        model = build("mlp", seed=0, input_size=784, width=args.width, depth=3, num_classes=10)
        settings = TrainSettings(epochs=args.epochs, batch_size=args.batch_size, precision=p)
        history = fit(model, data, settings, device=args.device)
        results[p] = history[-1]["test_accuracy"]
        seconds = sum(h["seconds"] for h in history)
        print(
            f"{p}: final test accuracy {100 * results[p]:.2f} %, train loss "
            f"{history[-1]['train_loss']:.4f}, {seconds:.1f} s"
        )
    diff = 100 * (results["bf16"] - results["fp32"])
    print(f"bf16 - fp32: {diff:+.2f} points")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=None, help="default 128 (gpt: 32)")
    parser.add_argument("--model", choices=("mlp", "gpt"), default="mlp")
    parser.add_argument(
        "--widths", default=None, help="default 512,1024,2048,4096 (gpt: 64,128,256)"
    )
    parser.add_argument("--context", type=int, default=64, help="gpt: tokens per window")
    parser.add_argument("--depth", type=int, default=2, help="gpt: blocks")
    parser.add_argument("--heads", type=int, default=4, help="gpt: attention heads")
    parser.add_argument("--vocab", type=int, default=105, help="gpt: vocabulary size")
    parser.add_argument("--steps", type=int, default=40, help="timed steps per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--accuracy", action="store_true", help="compare final test accuracy")
    parser.add_argument("--width", type=int, default=2048, help="MLP width for --accuracy")
    parser.add_argument("--epochs", type=int, default=3, help="epochs for --accuracy")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.batch_size is None:
        args.batch_size = 32 if args.model == "gpt" else 128
    if args.widths is None:
        args.widths = "64,128,256" if args.model == "gpt" else "512,1024,2048,4096"
    if args.accuracy:
        accuracy(args)
    elif args.model == "gpt":
        gpt_throughput(args)
    else:
        throughput(args)


if __name__ == "__main__":
    main()
