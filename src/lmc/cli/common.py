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
