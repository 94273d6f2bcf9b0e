"""GPU check: lmc's training step, weight matching and path evaluation on CUDA, against the CPU.

Run by ``scripts/gpu_check.sh`` (which also runs the tests marked ``gpu``). In one process,
on the same data and seeds, each part runs on the CPU and then on the GPU:

- **training**: one small model per architecture (``mlp``, ``vgg11``, ``resnet20``, ``vit``,
  ``gpt``; the GPT on random token windows, next-token loss) trained ``--steps`` steps by
  :func:`lmc.train.fit` (fp32; ``--precision bf16`` for autocast), timed after a one-step
  warm-up on each device; the first step's loss must agree between the devices (1e-3);
- **weight matching**: :func:`lmc.perm.weight_matching` (lmc's defaults) on each device,
  timed on two independently initialised MLPs of width ``--width`` (depth 3), and checked on
  an MLP and a copy of it with its hidden units permuted at random: the permutation must be
  recovered exactly;
- **path evaluation**: :func:`lmc.metrics.evaluate_path` of two independently initialised
  MLPs (11 points) on random data: the losses must agree between the devices (relative
  1e-4).

Each line gives both times and the speed-up (CPU seconds / GPU seconds); the times are the
best of ``--repeats``. Without CUDA (or with ``--device cpu``) only the CPU half runs, and the
log says what was skipped; the script exits 0 either way unless a check fails (exit 1).
The log goes to ``OUT/gpu_check.log`` (and ``OUT/gpu_check.json``), OUT from ``--out``, else
``$OUT``, else the current folder.

    python benchmarks/gpu_check.py [--out DIR] [--quick] [--steps 20] [--width 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

ARCHS = ("mlp", "vgg11", "resnet20", "vit", "gpt")


class Log:
    """Prints each line and keeps it for the log file."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, text: str) -> None:
        print(text, flush=True)
        self.lines.append(text)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed(fn, device: str, repeats: int) -> tuple[float, Any]:
    """(best seconds of ``repeats`` calls, the last call's result)."""
    best, out = float("inf"), None
    for _ in range(repeats):
        _sync(device)
        t = time.perf_counter()
        out = fn()
        _sync(device)
        best = min(best, time.perf_counter() - t)
    return best, out


QUICK = {"batch": 8, "image": 16, "context": 8, "vocab": 16}
QUICK_WIDTHS = {"mlp": 32, "vgg11": 0.125, "resnet20": 0.5, "vit": 16, "gpt": 16}
FULL = {"batch": 128, "image": 32, "context": 64, "vocab": 256}
FULL_WIDTHS = {"mlp": 1024, "vgg11": 1.0, "resnet20": 2.0, "vit": 192, "gpt": 192}


def _sizes(quick: bool) -> dict[str, Any]:
    return {**QUICK, "width": QUICK_WIDTHS} if quick else {**FULL, "width": FULL_WIDTHS}


def _dataset(arch: str, sizes: dict[str, Any], examples: int):
    """Random data of the architecture's input kind (fixed seed), as an lmc Dataset."""
    from lmc.data import Dataset

    gen = torch.Generator().manual_seed(0)
    if arch == "gpt":
        shape = (sizes["context"],)
        x = torch.randint(0, sizes["vocab"], (examples, *shape), generator=gen)
        y = torch.randint(0, sizes["vocab"], (examples, *shape), generator=gen)
        return Dataset(
            "tokens", x, y, x[:8], y[:8], sizes["vocab"], shape, (), (), False, task="next-token"
        )
    shape = (3, sizes["image"], sizes["image"])
    if arch == "mlp":
        shape = (3 * sizes["image"] ** 2,)
    x = torch.randn(examples, *shape, generator=gen)
    y = torch.randint(0, 10, (examples,), generator=gen)
    return Dataset("random", x, y, x[:8], y[:8], 10, shape, (0.0,), (1.0,), False)


def _model(arch: str, sizes: dict[str, Any], data, seed: int = 0):
    from lmc.models import build

    width = sizes["width"][arch]
    if arch == "gpt":
        return build("gpt", vocab=sizes["vocab"], context=sizes["context"], width=width, seed=seed)
    if arch == "mlp":
        return build("mlp", input_size=data.input_shape[0], num_classes=10, width=width, seed=seed)
    extra = {"image_size": sizes["image"]} if arch == "vit" else {}
    return build(arch, in_channels=3, num_classes=10, width=width, seed=seed, **extra)


def check_training(arch: str, devices: list[str], args, log: Log) -> dict[str, Any]:
    """Train ``arch`` ``args.steps`` steps on each device; the first step's loss compared."""
    from lmc.train import TrainSettings, fit

    sizes = _sizes(args.quick)
    data = _dataset(arch, sizes, sizes["batch"] * args.steps)
    settings = TrainSettings(
        epochs=1,
        batch_size=sizes["batch"],
        lr=0.01,
        precision=args.precision,
        init_seed=0,
        data_seed=0,
    )
    one = _dataset(arch, sizes, sizes["batch"])  # one step: the warm-up, and the loss compared
    out: dict[str, Any] = {}
    for device in devices:
        first = fit(_model(arch, sizes, one), one, settings, device=device, evaluate_test=False)
        seconds, _ = _timed(
            lambda d=device: fit(
                _model(arch, sizes, data), data, settings, device=d, evaluate_test=False
            ),
            device,
            args.repeats,
        )
        out[device] = {"seconds": seconds, "first_loss": first[0]["train_loss"]}
    return _report(
        f"train {arch} ({args.steps} steps)",
        out,
        devices,
        log,
        agree=lambda a, b: (
            abs(a["first_loss"] - b["first_loss"]) <= 1e-3 * max(1.0, abs(a["first_loss"]))
        ),
    )


def check_matching(devices: list[str], args, log: Log) -> dict[str, Any]:
    """Weight matching on each device: timed on two independently initialised MLPs (their
    objectives reported), checked on an MLP and a copy with permuted units (recovered
    exactly)."""
    from lmc.models import build
    from lmc.perm import (
        apply_permutation,
        invert_permutation,
        random_permutation,
        spec_from_model,
        weight_matching,
    )

    width = 32 if args.quick else args.width

    def mlp(seed: int):
        return build("mlp", input_size=64, num_classes=10, width=width, depth=3, seed=seed)

    model = mlp(0)
    spec = spec_from_model(model, torch.zeros(2, 64))
    state_a, other = model.state_dict(), mlp(1).state_dict()
    pi = random_permutation(spec, 1)
    permuted = apply_permutation(spec, pi, state_a)
    expected = invert_permutation(pi)
    out: dict[str, Any] = {}
    for device in devices:
        sa, sb, sp = ({k: v.to(device) for k, v in s.items()} for s in (state_a, other, permuted))
        known = weight_matching(spec, sa, sp)  # also the warm-up
        exact = all(torch.equal(known.perm[g], expected[g]) for g in spec.group_sizes)
        seconds, result = _timed(
            lambda a=sa, b=sb: weight_matching(spec, a, b), device, args.repeats
        )
        out[device] = {
            "seconds": seconds,
            "recovered": exact,
            "objective": result.objective_after,
            "passes": result.passes,
            "solver": result.solver,
        }
    objectives = ", ".join(f"{d} {out[d]['objective']:.4f}" for d in devices)
    log(f"  weight matching objectives (independent MLPs): {objectives}")
    return _report(
        f"weight matching (MLP width {width}, depth 3)",
        out,
        devices,
        log,
        agree=lambda a, b: a["recovered"] and b["recovered"],
        alone=lambda a: a["recovered"],
    )


def check_path(devices: list[str], args, log: Log) -> dict[str, Any]:
    """An 11-point path between two MLPs, on each device."""
    from lmc.metrics import evaluate_path
    from lmc.models import build

    width = 32 if args.quick else args.width
    n = 256 if args.quick else 10_000
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(n, 784, generator=gen), torch.randint(0, 10, (n,), generator=gen)
    out: dict[str, Any] = {}
    for device in devices:
        a = build("mlp", input_size=784, num_classes=10, width=width, seed=1).to(device)
        b = build("mlp", input_size=784, num_classes=10, width=width, seed=2).to(device)
        xd, yd = x.to(device), y.to(device)
        evaluate_path(a, b, xd[:64], yd[:64], 3)  # warm-up
        seconds, path = _timed(
            lambda a=a, b=b, xd=xd, yd=yd: evaluate_path(a, b, xd, yd, 11), device, args.repeats
        )
        out[device] = {"seconds": seconds, "loss": [float(v) for v in path.loss]}
    return _report(
        f"path evaluation (11 points, MLP width {width}, {n} examples)",
        out,
        devices,
        log,
        agree=lambda a, b: all(
            abs(p - q) <= 1e-4 * max(1.0, abs(p)) for p, q in zip(a["loss"], b["loss"])
        ),
    )


def _report(what: str, out: dict[str, Any], devices: list[str], log: Log, agree, alone=None):
    cpu = out["cpu"]
    ok = alone(cpu) if alone else True
    if len(devices) > 1:
        gpu = out[devices[1]]
        ok = ok and agree(cpu, gpu)
        log(
            f"{what}: cpu {cpu['seconds']:.3f} s, {devices[1]} {gpu['seconds']:.3f} s: "
            f"{cpu['seconds'] / gpu['seconds']:.1f}x faster on the GPU; "
            f"{'agree' if ok else 'DISAGREE'}"
        )
    else:
        log(f"{what}: cpu {cpu['seconds']:.3f} s{'' if ok else ' (CHECK FAILED)'}")
    return {"what": what, "ok": ok, **out}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or ".", help="log folder")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a test of the script)")
    parser.add_argument("--steps", type=int, default=20, help="training steps per model")
    parser.add_argument("--width", type=int, default=1024, help="MLP width of matching/path")
    parser.add_argument("--repeats", type=int, default=2, help="timings: best of this many")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--device", default="cuda", help="the GPU to compare (cpu: none)")
    parser.add_argument("--archs", default=",".join(ARCHS), help="architectures to train")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.repeats = min(args.steps, 2), 1
    log = Log()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cuda = args.device != "cpu" and torch.cuda.is_available()
    devices = ["cpu", args.device] if cuda else ["cpu"]
    log(f"$ python benchmarks/gpu_check.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    name = torch.cuda.get_device_name(args.device) if cuda else "none"
    log(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads; GPU: {name}")
    if not cuda:
        why = "--device cpu" if args.device == "cpu" else "torch.cuda.is_available() is False"
        log(f"skipped: every GPU half and every speed-up ({why}); the CPU halves run alone")
    records = []
    for arch in [a for a in args.archs.split(",") if a]:
        try:
            records.append(check_training(arch, devices, args, log))
        except Exception as exc:  # noqa: BLE001 - reported, and the check fails
            log(f"train {arch}: FAILED: {type(exc).__name__}: {exc}")
            records.append({"what": f"train {arch}", "ok": False, "error": str(exc)})
    records.append(check_matching(devices, args, log))
    records.append(check_path(devices, args, log))
    failed = [r["what"] for r in records if not r["ok"]]
    log("all checks passed" if not failed else f"FAILED: {'; '.join(failed)}")
    (out / "gpu_check.log").write_text("\n".join(log.lines) + "\n")
    (out / "gpu_check.json").write_text(
        json.dumps({"cuda": cuda, "device": name, "records": records}, indent=1, default=str)
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
