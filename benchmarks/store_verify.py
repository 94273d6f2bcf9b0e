"""What the integrity checks cost when a finished run is reused.

Workload: one finished run of a width-1024 MLP (784 -> 1024 -> 1024 -> 1024 -> 10, about 2.9M
parameters, an 11.7 MB ``model.safetensors``) in a temporary run store. "Loading a reused run"
is what a reuse does before the weights are used: find the run and build its model with the
stored weights. Three ways, alternating, ``--repeats`` times each (medians shown):

- ``no checks``: what lmc did before manifests, step for step: ``RunStore.find`` (is it
  finished? read ``config.json`` and ``metrics.json``), then ``Run.build_model``
  (``safetensors.torch.load_file`` the weights, build the model, load them);
- ``checks``: ``RunStore.find(config)`` (config against the folder's hash, every file's size,
  SHA-256 of every file) and ``Run.build_model()``, with the stat cache warm, as on every reuse
  but the first after the files were written or copied (see ``lmc.store.manifest``);
- ``checks, cold``: the same with the stat cache deleted first, so every byte is hashed (the
  first reuse after a copy; ``lmc verify`` hashes like this every time).

The last line is the acceptance number: the checks' extra time (the median of the paired,
per-round differences, robust to a shared machine's load) as a share of the reused run's
load time without checks.

    .venv/bin/python benchmarks/store_verify.py [--repeats R] [--width W]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

import lmc.store.manifest as manifest
from lmc.models import build
from lmc.store import RunStore


def _config(width: int) -> dict:
    return {
        "kind": "train",
        "dataset": "fashion-mnist",
        "dataset_options": {},
        "model": "mlp",
        "model_options": {"input_size": 784, "width": width, "depth": 3, "num_classes": 10},
        "train": {"epochs": 1},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=60)
    parser.add_argument("--width", type=int, default=1024)
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = _config(args.width)

    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore(tmp)
        model = build("mlp", seed=0, **config["model_options"])
        run = store.save(config, model.state_dict(), {"final_test_accuracy": 0.0})
        size = (run.path / "model.safetensors").stat().st_size
        time.sleep(manifest.RACY_SECONDS + 0.1)  # files older than the cache's racy window
        store.find(config).build_model()  # hashes everything once and fills the cache

        def unchecked() -> None:  # lmc's reuse before manifests, step for step
            path: Path = store.path_for(config)
            if not (path / "model.safetensors").exists() or not (path / "metrics.json").exists():
                raise SystemExit("the run vanished")
            if json.loads((path / "metrics.json").read_text()).get("status") != "finished":
                raise SystemExit("the run is not finished")
            if not path.is_dir() or not (path / "config.json").exists():
                raise SystemExit("not a run folder")
            cfg = json.loads((path / "config.json").read_text())
            assert (path / "model.safetensors").exists() and (path / "metrics.json").exists()
            json.loads((path / "metrics.json").read_text())
            m = build(cfg["model"], **cfg["model_options"])
            m.load_state_dict(load_file(str(path / "model.safetensors")), strict=True)
            m.eval()

        def checked() -> None:
            store.find(config).build_model()

        def cold() -> None:
            (store.path_for(config) / manifest.CACHE_FILE).unlink(missing_ok=True)
            store.find(config).build_model()

        ways = {"no checks": unchecked, "checks": checked, "checks, cold": cold}
        times: dict[str, list[float]] = {k: [] for k in ways}
        for fn in ways.values():
            fn()  # warm-up
        for _ in range(args.repeats):
            for name, fn in ways.items():
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
            checked()  # leave the cache warm for the next round

    base = statistics.median(times["no checks"])

    def extra(name: str) -> float:  # the median of the per-round differences (paired)
        return statistics.median(a - b for a, b in zip(times[name], times["no checks"]))

    print(f"reused run: width-{args.width} MLP, model.safetensors {size / 1e6:.1f} MB, "
          f"{args.repeats} rounds, medians")  # fmt: skip
    for name, values in times.items():
        print(
            f"  {name:<13} {statistics.median(values) * 1e3:7.2f} ms  (range "
            f"{min(values) * 1e3:.2f}-{max(values) * 1e3:.2f})  extra {extra(name) * 1e3:+.2f} ms"
        )
    print(
        f"checks on reuse: {extra('checks') * 1e3:+.2f} ms = "
        f"{100 * extra('checks') / base:+.1f}% of the {base * 1e3:.2f} ms load (target < 5%); "
        f"a full rehash (cold) costs {100 * extra('checks, cold') / base:+.1f}%"
    )


if __name__ == "__main__":
    main()
