"""Options and helpers shared by the verbs of the ``lmc`` command."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

import torch

from lmc.config import LmcError, resolve_device


def add_device_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        default="auto",
        help="where to compute: cpu, cuda, cuda:N, mps, or auto (a GPU if present)",
    )


def add_output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object on stdout (keys in README)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def add_data_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        default=None,
        help="folder holding dataset files (then $LMC_DATA, ~/.cache/lmc, system locations)",
    )
    parser.add_argument(
        "--download", action="store_true", help="download the dataset if missing (needs internet)"
    )


def add_runs_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runs-dir", default=None, help="the run store (default: $LMC_RUNS or ./runs)"
    )


def device_from(args: argparse.Namespace) -> torch.device:
    return resolve_device(getattr(args, "device", "auto"))


def jsonable(obj: Any) -> Any:
    """Convert tensors, numpy values, paths and non-finite floats into JSON-safe values."""
    import numpy as np

    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return jsonable(obj.tolist())
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, (np.floating, np.integer, np.bool_)):
        return jsonable(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if hasattr(obj, "__fspath__"):
        return str(obj)
    return obj


def emit_json(obj: Any) -> None:
    """Print ``obj`` as one JSON object on stdout (non-finite floats become null)."""
    sys.stdout.write(json.dumps(jsonable(obj), sort_keys=True) + "\n")
    sys.stdout.flush()


def parse_float_list(text: str, what: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise LmcError(f"{what} must be comma-separated numbers, got {text!r}") from exc


def dataset_for_config(config: dict[str, Any], args: argparse.Namespace, device: torch.device):
    """Load the dataset a run was trained on (its ``dataset`` and ``dataset_options``)."""
    from lmc.data import load

    return load(
        config["dataset"],
        data_dir=getattr(args, "data_dir", None),
        device=device,
        download=getattr(args, "download", False),
        **config.get("dataset_options", {}),
    )


def resolve_run(text: str, runs_dir: str | None):
    """A run given as a folder path, or as a folder name inside the run store."""
    from pathlib import Path

    from lmc.store import default_runs_dir, load_run

    path = Path(text)
    if not path.is_dir():
        store = Path(runs_dir) if runs_dir is not None else default_runs_dir()
        if (store / text).is_dir():
            path = store / text
    return load_run(path)


def _first_difference(a: Any, b: Any, where: str) -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            found = _first_difference(a.get(key), b.get(key), f"{where}.{key}")
            if found:
                return found
        return None
    return None if a == b else f"{where} is {a!r} in RUN_A but {b!r} in RUN_B"


def check_same_setup(run_a, run_b, verb: str) -> None:
    """One-line ``LmcError`` naming the first difference of architecture or dataset."""
    for key in ("model", "model_options", "dataset", "dataset_options"):
        found = _first_difference(run_a.config.get(key), run_b.config.get(key), key)
        if found:
            raise LmcError(
                f"the runs do not match: {found}; {verb} needs two models of one architecture "
                "trained on one dataset"
            )


def align_to_a(method: str, model_a, model_b, data, seed: int, quiet: bool):
    """B permuted to match A by ``lmc.perm.align`` on the training split (an ``AlignResult``)."""
    from lmc.perm import align

    return align(
        method, model_a, model_b, inputs=data.x_train, labels=data.y_train, seed=seed, quiet=quiet
    )
