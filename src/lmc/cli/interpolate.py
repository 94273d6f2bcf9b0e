"""Evaluate the linear path between two runs and report its barriers.

The path is theta(lam) = (1 - lam) theta_A + lam theta_B (lam = 0 is RUN_A, lam = 1 is RUN_B),
optionally after permuting B to match A (--align). Per lam: loss and accuracy on the split,
the logits' mean norm, the ensemble (1 - lam) f_A + lam f_B, and with --calibrate the inverse
temperature beta fitted on a fixed random 20% of the split and the calibrated loss on the other
80%. BatchNorm statistics of interpolated models are reset on the training split (--bn). The
barriers follow SCIENCE.md. Writes curve.csv, summary.json and path.png into --out (default
./interpolations/<RUN_A>__<RUN_B>[__<align>]); --json prints the summary.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path
from typing import Any

from lmc.config import LmcError, environment_info
from lmc.store import atomic_path, write_json, write_text

from .common import (
    add_data_options,
    add_device_option,
    add_output_options,
    add_runs_dir_option,
    align_to_a,
    check_same_setup,
    dataset_for_config,
    device_from,
    emit_json,
    jsonable,
    parse_float_list,
    resolve_run,
)

ALIGN_METHODS = ("none", "weight", "activation", "ste", "random")
BASELINES = ("none", "random-direction")
PER_LAMBDA = (
    "loss",
    "accuracy",
    "calibrated_loss",
    "inverse_temperature",
    "ensemble_loss",
    "ensemble_accuracy",
    "logit_norm",
    "heldout_loss",
    "ensemble_calibrated_loss",
    "ensemble_inverse_temperature",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from lmc.merge import BN_MODES

    parser.add_argument(
        "run_a", metavar="RUN_A", help="run folder (or name in the store) of A, λ = 0"
    )
    parser.add_argument(
        "run_b", metavar="RUN_B", help="run folder (or name in the store) of B, λ = 1"
    )
    parser.add_argument(
        "--align",
        default="none",
        choices=ALIGN_METHODS,
        metavar="METHOD",
        help="permute B to match A first (lmc.perm.align on the training split): "
        + ", ".join(ALIGN_METHODS),
    )
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
    parser.add_argument(
        "--lambdas",
        default="11",
        help="number of evenly spaced λ from 0 to 1, or a comma-separated list; 0, 0.5 and 1 "
        "are always added",
    )
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="fit a softmax inverse temperature per λ on 20%% of the split, report calibrated "
        "losses on the other 80%%",
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
        "--seed", type=int, default=0, help="seed of the alignment and of the random direction"
    )
    parser.add_argument(
        "--calibration-seed", type=int, default=0, help="seed of the 20%% calibration subset"
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
    add_runs_dir_option(parser)
    add_data_options(parser)
    add_device_option(parser)
    add_output_options(parser)


def parse_lambdas(text: str) -> int | list[float]:
    text = text.strip()
    if text.isdigit():
        return int(text)
    return parse_float_list(text, "--lambdas")


def _curve(result) -> dict[str, Any]:
    d = result.to_dict()
    return {"lambdas": d["lambdas"], **{k: d[k] for k in PER_LAMBDA}}


def _csv_text(paths: dict[str, Any]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["path", "lambda", *PER_LAMBDA])
    for name, result in paths.items():
        for row in result.rows():
            values = ["" if row[k] is None else repr(float(row[k])) for k in PER_LAMBDA]
            writer.writerow([name, repr(float(row["lambda"])), *values])
    return buf.getvalue()


def plot_path(path: Path, result, baseline=None, title: str = "") -> None:
    """path.png: loss (and calibrated loss) and accuracy against λ, A (λ = 0) on the left.

    A random-direction baseline, when given, is drawn dashed in the same colours.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    curves = [(result, "-", "")] + ([(baseline, "--", " (random direction)")] if baseline else [])
    for res, style, suffix in curves:
        lam = res.lambdas
        ax_loss.plot(lam, res.loss, style, color="C0", marker=".", label=f"loss{suffix}")
        if res.calibrated_loss is not None:
            ax_loss.plot(
                lam,
                res.calibrated_loss,
                style,
                color="C1",
                marker=".",
                label=f"calibrated loss{suffix}",
            )
        ax_acc.plot(lam, res.accuracy, style, color="C2", marker=".", label=f"accuracy{suffix}")
    for ax, values in ((ax_loss, result.loss), (ax_acc, result.accuracy)):
        ax.scatter([0.0, 1.0], [values[0], values[-1]], s=60, color="k", zorder=3)
        ax.set_xticks([0.0, 0.25, 0.5, 0.75, 1.0])
        ax.set_xticklabels(["0\nA", "0.25", "0.5", "0.75", "1\nB"])
        ax.set_xlabel("λ   (θ(λ) = (1 − λ)θ_A + λθ_B)")
        ax.set_xlim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax_loss.set_ylabel("cross-entropy (nats)")
    ax_acc.set_ylabel("accuracy (fraction)")
    if title:
        fig.suptitle(title, fontsize=9)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def format_table(result) -> str:
    """λ, loss, accuracy, calibrated loss, β and ensemble accuracy, one row per λ."""
    lines = [
        f"{'λ':>6} {'loss':>9} {'acc':>7} {'cal.loss':>9} {'β':>8} {'ens.acc':>8}",
    ]
    for row in result.rows():
        lines.append(
            f"{row['lambda']:6.3f} {row['loss']:9.4f} {row['accuracy']:7.4f} "
            f"{_fmt(row['calibrated_loss'], '9.4f')} {_fmt(row['inverse_temperature'], '8.3f')} "
            f"{row['ensemble_accuracy']:8.4f}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from lmc.metrics import evaluate_path, random_direction_state

    lambdas = parse_lambdas(args.lambdas)
    if args.max_examples is not None and args.max_examples < 2:
        raise LmcError(f"--max-examples must be at least 2, got {args.max_examples}")
    run_a = resolve_run(args.run_a, args.runs_dir)
    run_b = resolve_run(args.run_b, args.runs_dir)
    check_same_setup(run_a, run_b, "interpolation")
    device = device_from(args)
    data = dataset_for_config(run_a.config, args, device)
    x, y = data.split(args.split)
    if args.max_examples is not None:
        x, y = x[: args.max_examples], y[: args.max_examples]
    model_a, model_b = run_a.build_model(device), run_b.build_model(device)

    state_b, align_info = None, None
    if args.align != "none":
        aligned = align_to_a(args.align, model_a, model_b, data, args.seed, args.quiet)
        state_b, align_info = aligned.state_dict, getattr(aligned, "info", None)
    common = dict(
        bn=args.bn,
        bn_inputs=data.x_train,
        bn_num_batches=args.bn_batches,
        seed=args.seed,
        calibrate=args.calibrate,
        calibration_seed=args.calibration_seed,
        batch_size=args.batch_size,
        quiet=args.quiet,
    )
    result = evaluate_path(model_a, model_b, x, y, lambdas, state_b=state_b, **common)
    paths = {"interpolation": result}
    baseline = None
    if args.baseline == "random-direction":
        sb = state_b if state_b is not None else model_b.state_dict()
        names = [n for n, _ in model_a.named_parameters()]
        direction = random_direction_state(
            model_a.state_dict(), sb, args.seed, parameter_names=names
        )
        # B' carries A's BatchNorm statistics, which do not fit its weights: reset its end too
        baseline = evaluate_path(
            model_a, None, x, y, lambdas, state_b=direction, reset_endpoints=True, **common
        )
        paths["random-direction"] = baseline

    out = (
        Path(args.out)
        if args.out
        else Path("interpolations")
        / (f"{run_a.name}__{run_b.name}" + ("" if args.align == "none" else f"__{args.align}"))
    )
    summary: dict[str, Any] = {
        **_curve(result),
        **result.barriers(),
        "align": args.align,
        "align_info": align_info,
        "bn": result.bn,
        "method": result.method,
        "split": args.split,
        "calibrate": result.calibrate,
        "calibration_seed": result.calibration_seed,
        "calibration_fraction": result.calibration_fraction,
        "num_examples": result.num_examples,
        "num_calibration": result.num_calibration,
        "num_heldout": result.num_heldout,
        "added_lambdas": result.added_lambdas,
        "calibration_at_bound": result.calibration_at_bound,
        "ensemble_calibration_at_bound": result.ensemble_calibration_at_bound,
        "seed": args.seed,
        "run_a": str(run_a.path),
        "run_b": str(run_b.path),
        "model": run_a.config["model"],
        "model_options": run_a.config["model_options"],
        "dataset": run_a.config["dataset"],
        "baseline": None,
        "out": str(out),
        "environment": environment_info(device),
    }
    if baseline is not None:
        summary["baseline"] = {
            "kind": "random-direction",
            "seed": args.seed,
            "filter_normalize": False,
            **_curve(baseline),
            **baseline.barriers(),
        }
    summary = jsonable(summary)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "curve.csv", _csv_text(paths))
    write_json(out / "summary.json", summary)
    title = f"A = {run_a.name}   B = {run_b.name}   align = {args.align}   bn = {result.bn}"
    plot_path(out / "path.png", result, baseline, title)

    for name, res in paths.items():
        if res.calibration_at_bound:
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
    print(
        f"A = {run_a.name}\nB = {run_b.name}"
        + (f" (aligned: {args.align})" if state_b is not None else "")
    )
    print(
        f"{result.num_examples} {args.split} examples of {run_a.config['dataset']}; "
        f"bn = {result.bn}; method = {result.method}"
        + (
            f"; calibrated on {result.num_calibration}, scored on {result.num_heldout} "
            f"(seed {result.calibration_seed})"
            if result.calibrate
            else ""
        )
    )
    print(format_table(result))
    print(_barrier_lines(summary))
    if baseline is not None:
        print("random-direction baseline:")
        print(format_table(baseline))
        print(_barrier_lines(summary["baseline"]))
    for name in ("curve.csv", "summary.json", "path.png"):
        print(f"wrote {out / name}", file=sys.stderr)
    return 0


def _barrier_lines(summary: dict[str, Any]) -> str:
    from lmc.metrics import BARRIER_KEYS

    keys = [k for k in BARRIER_KEYS if summary.get(k) is not None]
    keys += [k for k in ("heldout_midpoint_loss_barrier",) if summary.get(k) is not None]
    return "\n".join(f"  {k:34s} {summary[k]: .4f}" for k in keys)
