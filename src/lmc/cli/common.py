"""Options and helpers shared by the verbs of the ``lmc`` command."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import torch

from lmc.config import LmcError, resolve_device
from lmc.store import jsonable


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
        elif path.exists():
            raise LmcError(
                f"{text} is a file, not a run: give a run folder (lmc train prints it) or its "
                "name in the run store"
            )
    return load_run(path)


def _first_difference(a: Any, b: Any, where: str) -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            found = _first_difference(a.get(key), b.get(key), f"{where}.{key}")
            if found:
                return found
        return None
    return None if a == b else f"{where} is {a!r} in RUN_A but {b!r} in RUN_B"


def check_same_data(run_a, run_b, verb: str) -> None:
    """One-line ``LmcError`` naming the first difference of the two runs' datasets (their
    architectures are compared on the built models, by ``lmc.models.check_same_architecture``)."""
    for key in ("dataset", "dataset_options"):
        found = _first_difference(run_a.config.get(key), run_b.config.get(key), key)
        if found:
            raise LmcError(
                f"the runs do not match: {found}; {verb} needs two models trained on one dataset"
            )


def load_pair(args: argparse.Namespace, verb: str):
    """``(run_a, run_b, model_a, model_b, data)`` for the verbs that take RUN_A RUN_B: both runs
    resolved, their datasets and architectures checked, the models built on ``--device`` and
    the dataset loaded there."""
    from lmc.models import check_same_architecture

    run_a, run_b = resolve_run(args.run_a, args.runs_dir), resolve_run(args.run_b, args.runs_dir)
    check_same_data(run_a, run_b, verb)
    device = device_from(args)
    model_a, model_b = run_a.build_model(device), run_b.build_model(device)
    check_same_architecture(model_a, model_b, names=("RUN_A", "RUN_B"))
    data = dataset_for_config(run_a.config, args, device)
    return run_a, run_b, model_a, model_b, data


def add_pair_arguments(parser: argparse.ArgumentParser) -> None:
    """RUN_A and RUN_B, then --align, --align-examples and --seed, as lmc.pair.PairSettings
    reads them."""
    from lmc.pair import ALIGN_METHODS

    parser.add_argument(
        "run_a", metavar="RUN_A", help="run folder (or its name in --runs-dir) of model A, λ = 0"
    )
    parser.add_argument(
        "run_b", metavar="RUN_B", help="run folder (or its name in --runs-dir) of model B, λ = 1"
    )

    parser.add_argument(
        "--align",
        default="none",
        choices=ALIGN_METHODS,
        metavar="METHOD",
        help="permute B to match A first: " + ", ".join(ALIGN_METHODS) + " (default none)",
    )
    parser.add_argument(
        "--align-examples",
        type=int,
        default=2000,
        metavar="N",
        help="training examples (drawn at random with --seed) that activation matching and "
        "STE read; 0 = the whole training split (default 2000, as in sweeps)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the alignment, its examples, BatchNorm-reset batches and random "
        "directions (default 0)",
    )


def add_lambdas_option(parser: argparse.ArgumentParser, default: str, help: str) -> None:
    """The λ option, named --lambdas in every verb (--lam is an alias)."""
    parser.add_argument("--lambdas", "--lam", dest="lambdas", default=default, help=help)
