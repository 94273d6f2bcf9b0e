"""The cost of fitting a curve: one epoch of curve training against one epoch of training the
model itself, on the same data, batch size and device.

For each width in ``--widths`` it builds two models A and B of ``--model`` (a depth-3 MLP on
random Fashion-MNIST-shaped data, or a causal GPT on random token windows) and times, with
``--repeats`` interleaved rounds (the order alternating, the best time of each kept):

- ``train``: one epoch of ``lmc.train.fit`` of model A (``--optimizer``, no test evaluation);
- ``curve``: one epoch of ``lmc.merge.fit_curve`` between A and B (``--kind``, the same
  optimizer, batch size and number of steps): per step one t, the point θ(t) of every
  parameter from θ_A, θ_C, θ_B, a forward and backward through ``functional_call`` and a step
  on θ_C.

It prints both epochs' seconds and their ratio (curve / train): what one epoch of curve fitting
costs in epochs of training. A curve's epoch does the training epoch's forward and backward
plus the point's three-term sum per parameter (and its gradient with respect to θ_C).

    python benchmarks/curve_fit.py [--model mlp] [--widths 256,1024] [--train-size 8192]
        [--batch-size 128] [--kind bezier] [--optimizer sgd] [--repeats 3] [--threads N]
        [--device cpu]
    python benchmarks/curve_fit.py --model gpt [--widths 64,128] [--context 64] [--vocab 105]
"""

from __future__ import annotations

import argparse
import functools
import time

import torch

from lmc.data import Dataset, load
from lmc.merge import fit_curve
from lmc.models import build
from lmc.train import TrainSettings, fit


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_train(model, initial, data: Dataset, settings: TrainSettings, device: str) -> float:
    """Seconds of one epoch of ``fit`` from the ``initial`` weights (reset outside the timing)."""
    model.load_state_dict(initial)
    _sync(device)
    start = time.perf_counter()
    fit(model, data, settings, device=device, evaluate_test=False)
    _sync(device)
    return time.perf_counter() - start


def time_curve(model_a, model_b, data: Dataset, args: argparse.Namespace) -> float:
    """Seconds of one epoch of ``fit_curve`` between ``model_a`` and ``model_b``."""
    _sync(args.device)
    start = time.perf_counter()
    fit_curve(
        model_a, model_b, data.x_train, data.y_train, kind=args.kind, epochs=1,
        batch_size=args.batch_size, optimizer=args.optimizer, lr=args.lr, task=data.task,
        device=args.device,
    )  # fmt: skip
    _sync(args.device)
    return time.perf_counter() - start


def make_data(args: argparse.Namespace) -> Dataset:
    if args.model == "mlp":
        return load(
            "synthetic",
            input_shape=(1, 28, 28),
            train_size=args.train_size,
            test_size=args.batch_size,
            device=args.device,
        )
    from lmc.data.text import build_text_dataset

    gen = torch.Generator().manual_seed(0)
    chars = int((args.train_size * args.context + 4 * (args.context + 1)) / 0.8)
    ids = torch.randint(args.vocab, (chars,), generator=gen).tolist()
    text = "".join(chr(0x100 + i) for i in ids)
    data = build_text_dataset(
        "random", text, context=args.context, splits=(0.8, 0.1, 0.1), device=args.device
    )
    data.x_train, data.y_train = data.x_train[: args.train_size], data.y_train[: args.train_size]
    return data


def make_model(args: argparse.Namespace, data: Dataset, width: int, seed: int):
    if args.model == "mlp":
        return build("mlp", seed=seed, input_size=784, width=width, depth=3, num_classes=10)
    return build(
        "gpt", seed=seed, vocab=data.num_classes, context=args.context, width=width,
        depth=args.depth, heads=args.heads,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("mlp", "gpt"), default="mlp")
    parser.add_argument("--widths", default=None, help="default 256,1024 (gpt: 64,128)")
    parser.add_argument("--train-size", type=int, default=8192, help="examples (windows)")
    parser.add_argument("--batch-size", type=int, default=None, help="default 128 (gpt: 32)")
    parser.add_argument("--kind", choices=("bezier", "chain"), default="bezier")
    parser.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--context", type=int, default=64, help="gpt: tokens per window")
    parser.add_argument("--depth", type=int, default=2, help="gpt: blocks")
    parser.add_argument("--heads", type=int, default=4, help="gpt: attention heads")
    parser.add_argument("--vocab", type=int, default=105, help="gpt: vocabulary size")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.batch_size is None:
        args.batch_size = 32 if args.model == "gpt" else 128
    if args.widths is None:
        args.widths = "64,128" if args.model == "gpt" else "256,1024"
    data = make_data(args)
    steps = len(data.x_train) // args.batch_size
    what = "depth-3 MLP, random Fashion-MNIST-shaped data" if args.model == "mlp" else (
        f"GPT depth {args.depth}, heads {args.heads}, context {args.context}, random tokens "
        f"(vocab {data.num_classes})"
    )  # fmt: skip
    print(
        f"{what}; {len(data.x_train)} training examples, batch {args.batch_size} ({steps} "
        f"steps/epoch), {args.optimizer} lr {args.lr:g}, curve {args.kind}; best of "
        f"{args.repeats} interleaved repeats; device {args.device}; torch threads "
        f"{torch.get_num_threads()}"
    )
    print(f"{'width':>6} {'params':>10} {'train s/epoch':>14} {'curve s/epoch':>14} "
          f"{'curve/train':>12}")  # fmt: skip
    for width in (int(w) for w in args.widths.split(",")):
        model_a = make_model(args, data, width, 0).to(args.device)
        model_b = make_model(args, data, width, 1).to(args.device)
        work = make_model(args, data, width, 0).to(args.device)
        initial = {k: v.clone() for k, v in work.state_dict().items()}
        settings = TrainSettings(
            epochs=1, batch_size=args.batch_size, optimizer=args.optimizer, lr=args.lr,
            schedule="constant",
        )  # fmt: skip
        jobs = {
            "train": functools.partial(time_train, work, initial, data, settings, args.device),
            "curve": functools.partial(time_curve, model_a, model_b, data, args),
        }
        for job in jobs.values():  # warm-up: allocator, kernel creation
            job()
        best = {name: float("inf") for name in jobs}
        for r in range(args.repeats):
            for name in jobs if r % 2 == 0 else list(jobs)[::-1]:
                best[name] = min(best[name], jobs[name]())
        params = sum(p.numel() for p in model_a.parameters())
        print(
            f"{width:>6} {params:>10} {best['train']:>14.3f} {best['curve']:>14.3f} "
            f"{best['curve'] / best['train']:>11.2f}x"
        )


if __name__ == "__main__":
    main()
