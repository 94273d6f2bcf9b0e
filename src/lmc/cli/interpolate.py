"""Evaluate the linear path between two runs and report its barriers.

The path is θ(λ) = (1 − λ)θ_A + λθ_B (λ = 0 is RUN_A, λ = 1 is RUN_B), optionally after
permuting B to match A (--align). Per λ: loss and accuracy on the split, the logits' mean
norm, the ensemble (1 − λ)f_A + λf_B, and with --calibrate the inverse temperature β fitted on
a fixed random 20% of the split and the calibrated loss on the other 80%. BatchNorm statistics
of interpolated models are reset on the training split (--bn). The barriers are defined in
docs/science.md. The work is done by lmc.pair (the same code as a sweep's merge job). Writes
curve.csv, summary.json and path.png into --out (default
./interpolations/<RUN_A>__<RUN_B>[__<align>]); --json prints the summary.

Your own model: with --model-factory module:callable (or path/file.py:callable, or
--hf-model FOLDER) RUN_A and RUN_B are two weight files of it, and --data names the data (a
zoo dataset, or a .npz/.safetensors file holding x and y).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from lmc.config import environment_info

from .common import (
    add_lambdas_option,
    add_pair_arguments,
    add_run_options,
    emit_json,
    load_inputs,
    pair_alignment,
    parse_float_list,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from lmc.merge import BN_MODES
    from lmc.metrics import CALIBRATE_DEFAULTS
    from lmc.pair import BASELINES

    add_pair_arguments(parser)
    parser.add_argument(
        "--bn",
        default="auto",
        choices=BN_MODES,
        help="BatchNorm after interpolation: auto (reset if the model has BatchNorm), reset "
        "(recompute statistics on the training split), repair (REPAIR, then reset), none",
    )
    parser.add_argument(
        "--bn-batches",
        type=int,
        default=None,
        help="reset BatchNorm on this many random training batches (seeded by --seed); unset: "
        "the whole training split",
    )
    add_lambdas_option(
        parser,
        "11",
        "number of evenly spaced λ from 0 to 1, or a comma-separated list; 0, 0.5 and 1 are "
        "always added (default 11)",
        count=True,
    )
    parser.add_argument(
        "--calibrate",
        action=argparse.BooleanOptionalAction,
        default=CALIBRATE_DEFAULTS["path"],
        help="fit a softmax inverse temperature per λ and report calibrated losses (how: "
        f"--calibration; default {'on' if CALIBRATE_DEFAULTS['path'] else 'off'})",
    )
    parser.add_argument(
        "--calibration",
        default="auto",
        choices=("auto", "split", "crossfit"),
        help="split: fit β on a random 20%% of the split, score the other 80%% (the paper's); "
        "crossfit: fit β on K-1 of K folds, score the held-out fold, every example scored "
        "once (stable on small splits); auto (default): crossfit when the 20%% subset would "
        "hold fewer than 1000 examples (splits under 5000), split otherwise",
    )
    parser.add_argument(
        "--calibration-folds",
        type=int,
        default=5,
        metavar="K",
        help="number of folds K of --calibration crossfit (at least 2; default 5)",
    )
    parser.add_argument(
        "--split", default="test", choices=("test", "train"), help="split to evaluate on"
    )
    parser.add_argument(
        "--baseline",
        default="none",
        choices=BASELINES,
        help="also evaluate A -> A + |B - A| u for a random unit direction u (flatness control)",
    )
    parser.add_argument(
        "--stitch",
        action="store_true",
        help="also measure the test error of A's first l layers followed by (aligned) B's, "
        "l = 0 (B) .. L (A) (LLFC App. B.4; summary key stitch_errors)",
    )
    parser.add_argument(
        "--calibration-seed",
        type=int,
        default=0,
        help="seed of the 20%% calibration subset or of the crossfit folds (default 0)",
    )
    parser.add_argument(
        "--max-examples",
        type=int,
        default=None,
        help="evaluate only the first N examples of the split; unset: all",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="examples per forward pass; unset: chosen by the evaluation method",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="output folder; unset: ./interpolations/<RUN_A>__<RUN_B>[__<align>]",
    )
    add_run_options(parser)


def parse_lambdas(text: str) -> int | list[float]:
    text = text.strip()
    if text.isdigit():
        return int(text)
    return parse_float_list(text, "--lambdas")


def settings_from_args(args: argparse.Namespace):
    """The :class:`lmc.pair.PairSettings` of the flags (the sweep builds the same object)."""
    from lmc.config import LmcError
    from lmc.pair import PairSettings, PathSettings

    if getattr(args, "align_examples", 0) is not None and args.align_examples < 0:
        raise LmcError(
            f"--align-examples must be at least 0 (0 = the whole training split), got "
            f"{args.align_examples}"
        )

    path = PathSettings(
        lambdas=parse_lambdas(args.lambdas),
        bn=args.bn,
        bn_num_batches=args.bn_batches,
        seed=args.seed,
        calibrate=args.calibrate,
        calibration=args.calibration,
        calibration_folds=args.calibration_folds,
        calibration_seed=args.calibration_seed,
        batch_size=args.batch_size,
        quiet=args.quiet,
    )
    return PairSettings(
        **pair_alignment(args),
        max_examples=args.max_examples,
        path=path,
        baseline=args.baseline,
        stitch=args.stitch,
    )


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def format_table(result) -> str:
    """λ, loss, accuracy, calibrated loss, β and ensemble accuracy, one row per λ."""
    lines = [
        f"{'λ':>6} {'loss':>9} {'acc':>7} {'cal.loss':>9} {'β':>8} {'ens.acc':>8}",
    ]
    for row in result.rows():
        lines.append(
            f"{row['lambda']:6.3f} {row['loss']:9.4f} {_fmt(row['accuracy'], '7.4f')} "
            f"{_fmt(row['calibrated_loss'], '9.4f')} {_fmt(row['inverse_temperature'], '8.3f')} "
            f"{_fmt(row['ensemble_accuracy'], '8.4f')}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from lmc.models import module_device
    from lmc.pair import run_pair, write_pair
    from lmc.pair import summary as pair_summary
    from lmc.pair.output import OUTPUT_MARKS
    from lmc.store import check_output_place

    settings = settings_from_args(args)
    pair = load_inputs(args, "interpolation")
    model_a, model_b, data = pair.model_a, pair.model_b, pair.data
    out = (
        Path(args.out)
        if args.out
        else Path("interpolations")
        / (f"{pair.name_a}__{pair.name_b}" + ("" if args.align == "none" else f"__{args.align}"))
    )
    check_output_place(out, replaces=OUTPUT_MARKS)  # before the work, not after it
    result = run_pair(model_a, model_b, data, settings, quiet=args.quiet)
    meta = {
        **pair.meta,
        "environment": environment_info(module_device(model_a)),
        "out": str(out),
    }
    summary = pair_summary(result, meta)
    title = f"A = {pair.name_a}   B = {pair.name_b}   align = {args.align}   bn = {result.path.bn}"
    written = write_pair(result, out, summary, title=title)
    paths = {"interpolation": result.path, "random-direction": result.baseline}
    for name, res in paths.items():
        if res is not None and res.calibration_at_bound:
            print(
                f"warning: {name}: at λ = {', '.join(f'{v:g}' for v in res.calibration_at_bound)} "
                f"the {res.num_calibration}-example calibration subset is perfectly classified, "
                "so β is not identifiable (on its bound) and the calibrated loss is undefined "
                "(NaN/null); use a larger split (--split, or more test examples)",
                file=sys.stderr,
            )
    if args.json:
        emit_json(summary)
        return 0
    path = result.path
    print(
        f"A = {pair.name_a}\nB = {pair.name_b}"
        + (f" (aligned: {args.align})" if args.align != "none" else "")
    )
    print(
        f"{path.num_examples} {args.split} examples of {pair.dataset}; "
        f"bn = {path.bn}; method = {path.method}"
        + (
            f"; calibrated on {path.num_calibration}, scored on {path.num_heldout} "
            f"(seed {path.calibration_seed})"
            if path.calibrate
            else ""
        )
    )
    print(format_table(path))
    print(_barrier_lines(summary))
    if result.baseline is not None:
        print("random-direction baseline:")
        print(format_table(result.baseline))
        print(_barrier_lines(summary["baseline"]))
    if result.stitch_errors is not None:
        errors = " / ".join(f"{e:.4f}" for e in result.stitch_errors)
        print(f"stitched error, l = 0 (B) .. {len(result.stitch_errors) - 1} (A): {errors}")
    for name in written:
        print(f"wrote {name}", file=sys.stderr)
    return 0


def _barrier_lines(summary: dict[str, Any]) -> str:
    from lmc.metrics import BARRIER_KEYS

    keys = [k for k in BARRIER_KEYS if summary.get(k) is not None]
    return "\n".join(f"  {k:34s} {summary[k]: .4f}" for k in keys)
