"""Permute model B's units to line up with model A's, and store the result as a new run.

Methods: weight (weight matching: data-free coordinate descent on Σ<W_A, P W_B P_prevᵀ>),
activation (one assignment per layer on the correlation of the two models' features over
training examples), ste (straight-through estimator: learns the permutation that lowers the
midpoint's training loss; the best one seen is kept, weight matching's included) and random
(a uniformly random valid permutation: the control). The permutation spec is derived from
the architecture with torch.fx.

The aligned B is written as a new run (kind "aligned") whose config names both source runs
and every setting that changes the result; the permutation is saved beside it as
perm.safetensors (index tensors: new unit i = old unit p[i]) with a perm.json summary. An
identical aligned run is reused. The new run folder is the last line on stdout.

Your own model: with --model-factory module:callable (or path/file.py:callable, or
--hf-model FOLDER) and --data, RUN_A and RUN_B are weight files; the aligned B is written to
--out FILE.safetensors (the last line on stdout) with FILE.perm.safetensors and FILE.perm.json
beside it.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch

from lmc.config import LmcError, environment_info
from lmc.perm.alignment import METHODS as PERM_METHODS
from lmc.perm.lap import SOLVERS
from lmc.store import RunStore, check_output_place, load_run, output_files, write_json

from .common import (
    add_data_options,
    add_device_option,
    add_model_options,
    add_output_options,
    add_runs_dir_option,
    check_same_data,
    dataset_for_config,
    device_from,
    emit_json,
    jsonable,
    load_inputs,
    uses_own_model,
)

METHODS = tuple(m for m in PERM_METHODS if m != "none")  # lmc.perm.align's, one list
STATISTICS = ("correlation", "covariance")
PERM_FILE = "perm.safetensors"
SUMMARY_FILE = "perm.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_a",
        metavar="RUN_A",
        help="run folder of model A (the reference); with --model-factory/--hf-model: A's "
        "weight file",
    )
    parser.add_argument(
        "run_b",
        metavar="RUN_B",
        help="run folder of model B (gets permuted); with --model-factory/--hf-model: B's "
        "weight file",
    )
    parser.add_argument(
        "--method",
        default="weight",
        help=f"alignment method: {', '.join(METHODS)}",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the method (weight matching's visiting order, STE's batches, the random "
        "permutation)",
    )
    wm = parser.add_argument_group("weight matching (also inside STE)")
    wm.add_argument("--max-iter", type=int, default=100, help="most coordinate-descent passes")
    wm.add_argument(
        "--tol",
        type=float,
        default=1e-4,
        help="stop after a pass that raises the matching objective by at most this fraction "
        "(0 = run until a pass changes nothing)",
    )
    wm.add_argument(
        "--init",
        default="onepass",
        choices=("onepass", "identity"),
        help="weight matching's start (default onepass): Git Re-Basin's greedy one-pass answer "
        "(higher objectives in less time on the benchmark MLPs; see README, Performance), or "
        "the identity (Git Re-Basin's own start, and lmc's before the one-pass default)",
    )
    wm.add_argument(
        "--solver",
        default="auto",
        choices=SOLVERS,
        help="weight matching's assignment solver (default auto: lapx on groups of 512 units "
        "or more where it is installed, pip install 'lmc[fast]', else scipy); every one is "
        "exact, but they may break exact ties differently",
    )
    wm.add_argument(
        "--restarts",
        type=int,
        default=1,
        help="run weight matching from K visiting orders and keep the highest objective "
        "(about K times the time)",
    )
    act = parser.add_argument_group("activation matching")
    act.add_argument(
        "--max-examples",
        type=int,
        default=5000,
        metavar="N",
        help="training examples streamed for the activation statistics (0 = all)",
    )
    act.add_argument(
        "--statistic",
        default="correlation",
        help=f"what is matched: {', '.join(STATISTICS)}",
    )
    act.add_argument(
        "--batch-size", type=int, default=256, help="batch size of the statistics pass"
    )
    ste = parser.add_argument_group("straight-through estimator")
    ste.add_argument("--ste-steps", type=int, default=200, help="Adam steps")
    ste.add_argument("--ste-lr", type=float, default=1e-3, help="Adam learning rate")
    ste.add_argument("--ste-batch-size", type=int, default=128, help="training batch size")
    ste.add_argument(
        "--ste-holdout",
        type=int,
        default=None,
        metavar="N",
        help="training examples held out to pick the best permutation "
        "(unset: min(1024, 20%% of the training set))",
    )
    add_model_options(parser)
    parser.add_argument(
        "--out",
        default=None,
        metavar="FILE.safetensors",
        help="with --model-factory/--hf-model (required there): where the aligned B's weights "
        "go; the permutation goes beside it as FILE.perm.safetensors and FILE.perm.json",
    )
    add_runs_dir_option(parser)
    add_data_options(parser)
    add_device_option(parser)
    add_output_options(parser)


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings of ``args.method`` that change the result (they enter the run's config)."""
    positive = {
        "--max-iter": args.max_iter,
        "--batch-size": args.batch_size,
        "--ste-steps": args.ste_steps,
        "--ste-batch-size": args.ste_batch_size,
        "--restarts": args.restarts,
    }
    for flag, value in positive.items():
        if value < 1:
            raise LmcError(f"{flag} must be at least 1, got {value}")
    if args.max_examples < 0:
        raise LmcError(f"--max-examples must be 0 (all) or positive, got {args.max_examples}")
    if not (args.ste_lr > 0 and math.isfinite(args.ste_lr)):
        raise LmcError(f"--ste-lr must be a positive number, got {args.ste_lr}")
    if not (args.tol >= 0 and math.isfinite(args.tol)):
        raise LmcError(f"--tol must be a non-negative number, got {args.tol}")
    if args.method == "weight":
        settings = {"max_iter": args.max_iter, "tol": args.tol}
        # the start, restarts and solver enter the run's config only away from the values
        # every earlier aligned run had (identity, 1, scipy), so those runs are still found
        if args.init != "identity":
            settings["init"] = args.init
        if args.restarts != 1:
            settings["restarts"] = args.restarts
        if args.solver != "scipy":
            settings["solver"] = args.solver
        return settings
    if args.method == "activation":
        if args.statistic not in STATISTICS:
            raise LmcError(
                f"unknown --statistic {args.statistic!r}: choose one of {', '.join(STATISTICS)}"
            )
        return {"statistic": args.statistic, "max_examples": args.max_examples or None}
    if args.method == "ste":
        return {
            "steps": args.ste_steps,
            "lr": args.ste_lr,
            "batch_size": args.ste_batch_size,
            "holdout": args.ste_holdout,
            "max_iter": args.max_iter,
            "tol": args.tol,
        }
    return {}


def _example_input(config: dict[str, Any]) -> torch.Tensor:
    """Two zero rows of the model's input, from the dataset's shape alone (no file read)."""
    from lmc.data import input_shape

    return torch.zeros(2, *input_shape(config["dataset"], **config.get("dataset_options", {})))


def _print_table(record: dict[str, Any], sizes: dict[str, int]) -> None:
    print(
        f"aligned {record['source']} onto {record['reference']}: method {record['method']}, "
        f"seed {record['seed']}, {record['seconds']:.2f} s"
    )
    before, after = record["objective_before"], record["objective_after"]
    print(f"matching objective sum<theta_A, pi(theta_B)>: {before:.6g} -> {after:.6g}")
    moved = record["moved_fraction"]
    if moved:
        width = max(len("group"), *(len(g) for g in moved))
        print(f"{'group':<{width}}  {'units':>6}  {'moved':>6}")
        for group, fraction in moved.items():
            print(f"{group:<{width}}  {sizes.get(group, 0):>6}  {fraction:>6.3f}")
    else:
        print("no permutable groups")


def run(args: argparse.Namespace) -> int:
    from lmc.models import check_same_architecture

    if args.method not in METHODS:
        raise LmcError(f"unknown --method {args.method!r}: choose one of {', '.join(METHODS)}")
    settings = _settings(args)
    if uses_own_model(args):
        return _run_own_model(args, settings)
    if args.out is not None:
        raise LmcError(
            "--out is for --model-factory/--hf-model; an aligned run goes into the run store"
        )
    if args.data is not None:
        raise LmcError(
            "--data is for --model-factory/--hf-model; runs use the dataset they were trained on"
        )
    run_a, run_b = load_run(args.run_a), load_run(args.run_b)
    check_same_data(run_a, run_b, "alignment")
    config = {
        "kind": "aligned",
        "dataset": run_a.config.get("dataset"),
        "dataset_options": run_a.config.get("dataset_options", {}),
        "model": run_a.config["model"],
        "model_options": run_a.config["model_options"],
        "align": {
            "method": args.method,
            "seed": args.seed,
            "reference": run_a.name,
            "source": run_b.name,
            **settings,
        },
    }
    store = RunStore(args.runs_dir)
    existing = store.find_or_reopen(config, "aligning")
    if existing is None:
        store.check_writable()
    if existing is not None and "align" in existing.metrics:
        record = existing.metrics["align"]
        if args.json:
            emit_json({**_json_record(record, existing.path), "reused": True})
        else:
            print(f"reusing the identical aligned run (delete {existing.path} to redo it)")
            _print_table(record, existing.metrics.get("group_sizes", {}))
            print(existing.path)
        return 0

    device = device_from(args)
    model_a, model_b = run_a.build_model(device), run_b.build_model(device)
    check_same_architecture(model_a, model_b, names=("RUN_A", "RUN_B"))
    if args.method in ("activation", "ste"):
        data = dataset_for_config(run_a.config, args, device)
        x_train, y_train = data.x_train, data.y_train
    else:
        x_train, y_train = _example_input(run_a.config), None
    start = time.perf_counter()
    result, info, record = _align_pair(
        args, model_a, model_b, x_train.to(device), y_train, settings, run_a.name, run_b.name
    )
    metrics = {
        "align": record,
        "info": info,
        "group_sizes": result.spec.group_sizes,
        "environment": environment_info(device),
        "wall_seconds": time.perf_counter() - start,
    }
    saved = store.save(
        config,
        result.state_dict,
        metrics,
        extra_tensors={PERM_FILE: dict(result.perm)},
        extra_json={SUMMARY_FILE: _summary(record, result.spec)},
    )
    if args.json:
        emit_json({**_json_record(record, saved.path), "reused": False})
        return 0
    _print_table(record, result.spec.group_sizes)
    print(saved.path)
    return 0


def _align_pair(
    args: argparse.Namespace,
    model_a,
    model_b,
    x_train: torch.Tensor,
    y_train: torch.Tensor | None,
    settings: dict[str, Any],
    reference: str,
    source: str,
):
    """Align B to A with ``args.method`` and return ``(result, info, record)``.

    Activation matching and STE use the training examples (activation matching at most
    ``settings["max_examples"]``) and STE their labels; weight matching and ``random`` need
    only two examples to trace the model with."""
    from lmc.perm import align

    labels = None
    if args.method in ("activation", "ste"):
        inputs, labels = x_train, y_train
        if args.method == "activation" and settings["max_examples"]:
            inputs = inputs[: settings["max_examples"]]
    else:
        inputs = x_train[:2]
    if args.method == "weight":  # the values left out of the config, given explicitly
        settings = {"init": "identity", "restarts": 1, "solver": "scipy", **settings}
    result = align(
        args.method,
        model_a,
        model_b,
        inputs=inputs,
        labels=labels,
        seed=args.seed,
        quiet=args.quiet or args.json,
        **settings,
    )
    info = jsonable(result.info)
    record = {
        "method": args.method,
        "seed": args.seed,
        "reference": reference,
        "source": source,
        "objective_before": info["objective_before"],
        "objective_after": info["objective_after"],
        "moved_fraction": info["moved_fraction"],
        "seconds": info["seconds"],
    }
    return result, info, record


def _perm_paths(out: Path) -> tuple[Path, Path]:
    """Where the permutation of an aligned weight file goes: beside it, FILE.perm.*."""
    stem = out.with_suffix("")
    return Path(f"{stem}.perm.safetensors"), Path(f"{stem}.perm.json")


def _summary(record: dict[str, Any], spec) -> dict[str, Any]:
    return {
        **record,
        "groups": {
            g: {
                "size": n,
                "moved_fraction": record["moved_fraction"][g],
                "members": [f"{name}[{axis}]" for name, axis in spec.groups[g]],
            }
            for g, n in spec.group_sizes.items()
        },
        "convention": "new unit i of B is old unit perm[group][i]",
    }


def _run_own_model(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    """Align two weight files of the user's model; write the aligned B as a weight file."""
    from lmc.models.factory import export_state
    from lmc.store import save_tensors

    if args.out is None or Path(args.out).suffix.lower() != ".safetensors":
        raise LmcError(
            "--out FILE.safetensors is needed with --model-factory/--hf-model: the aligned B "
            f"is written as a weight file (got {args.out!r})"
        )
    out = Path(args.out)
    if out.resolve() in (Path(args.run_a).resolve(), Path(args.run_b).resolve()):
        raise LmcError(f"--out {out} would overwrite an input weight file; choose another name")
    check_output_place(out.parent)
    if out.is_dir():
        raise LmcError(f"--out {out} is a folder; give a file name ending in .safetensors")
    pair = load_inputs(args, "alignment")
    start = time.perf_counter()
    result, info, record = _align_pair(
        args,
        pair.model_a,
        pair.model_b,
        pair.data.x_train,
        pair.data.y_train,
        settings,
        str(args.run_a),
        str(args.run_b),
    )
    perm_file, summary_file = _perm_paths(out)
    summary = {
        **_summary(record, result.spec),
        "settings": settings,
        **{k: v for k, v in pair.meta.items() if k not in ("weights_a", "weights_b")},
        "environment": environment_info(device_from(args)),
        "wall_seconds": time.perf_counter() - start,
    }
    with output_files(out.parent, [out.name, perm_file.name, summary_file.name]) as stage:
        save_tensors(stage / out.name, export_state(pair.model_b, result.state_dict))
        save_tensors(stage / perm_file.name, dict(result.perm))
        write_json(stage / summary_file.name, summary)
    if args.json:
        keys = [k for k in _JSON_KEYS if k != "run_dir"]
        emit_json({"out": str(out), "perm": str(perm_file), **{k: record[k] for k in keys}})
        return 0
    _print_table(record, result.spec.group_sizes)
    print(f"wrote {perm_file} and {summary_file}", file=sys.stderr)
    print(out)
    return 0


_JSON_KEYS = (
    "method",
    "seed",
    "objective_before",
    "objective_after",
    "moved_fraction",
    "seconds",
    "reference",
    "source",
)


def _json_record(record: dict[str, Any], path) -> dict[str, Any]:
    return {"run_dir": str(path), **{k: record[k] for k in _JSON_KEYS}}
