"""Fit a curve between two runs and evaluate it beside the straight line.

A quadratic Bézier curve θ(t) = (1 − t)²θ_A + 2t(1 − t)θ_C + t²θ_B or a polygonal chain
A → θ_C → B (--kind; t = 0 is RUN_A, t = 1 is RUN_B) through a control point θ_C trained from
the midpoint on the training split to minimise the expected loss along the curve (Garipov et
al. 2018; t drawn uniformly each step), optionally after aligning B to A (--align, as lmc
interpolate). The line and the curve are evaluated on the same grid (λ for the line, t for the
curve) with the same calibration and BatchNorm handling, and their barriers reported side by
side; the loss landscape on the plane through A, B and θ_C is drawn too (--plane). The control
point is stored as a run: in the run store for two runs (reused when its config matches), in
OUT/control for weight files. Definitions: docs/science.md, "Curves between two models". The
work is done by lmc.pair.curve_pair (the same code as a study's [merge] paths). Writes
curve.csv, summary.json, path.png and plane.png into --out (default
./curves/<RUN_A>__<RUN_B>__<kind>[__<align>]); --json prints the summary.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lmc.config import environment_info

from . import interpolate
from .common import emit_json, load_inputs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from lmc.merge import CurveSettings
    from lmc.merge.curve_fit import CURVE_OPTIMIZERS, CURVE_SCHEDULES
    from lmc.metrics.plane import DEFAULT_PLANE_POINTS

    interpolate.add_arguments(parser)  # the pair, the alignment and the path, as there
    for action in parser._actions:  # the one option whose default differs from interpolate's
        if "--out" in action.option_strings:
            action.help = "output folder; unset: ./curves/<RUN_A>__<RUN_B>__<kind>[__<align>]"
    defaults = CurveSettings()
    group = parser.add_argument_group(
        "the curve (its control point θ_C, trained from the midpoint)"
    )
    group.add_argument(
        "--kind",
        default="bezier",
        choices=("bezier", "chain"),
        help="bezier: quadratic Bézier curve through θ_C; chain: A → θ_C → B, the bend at t = ½",
    )
    group.add_argument("--epochs", type=int, default=defaults.epochs,
                       help="passes over the training split")  # fmt: skip
    group.add_argument("--lr", type=float, default=defaults.lr, help="peak learning rate")
    group.add_argument(
        "--optimizer", default=defaults.optimizer, choices=CURVE_OPTIMIZERS, help="optimizer"
    )
    group.add_argument(
        "--schedule", default=defaults.schedule, choices=CURVE_SCHEDULES,
        help="learning-rate schedule (cosine: to 0 over all steps)",
    )  # fmt: skip
    group.add_argument("--momentum", type=float, default=defaults.momentum,
                       help="SGD momentum (Adam's beta1)")  # fmt: skip
    group.add_argument("--weight-decay", type=float, default=defaults.weight_decay,
                       help="coupled L2 weight decay on θ_C")  # fmt: skip
    group.add_argument("--curve-batch-size", type=int, default=defaults.batch_size,
                       help="training examples per step of the curve's training")  # fmt: skip
    group.add_argument(
        "--steps-per-epoch", type=int, default=None,
        help="steps per epoch; unset: one pass over the training split",
    )  # fmt: skip
    group.add_argument(
        "--plane", type=int, default=DEFAULT_PLANE_POINTS, metavar="N",
        help="the loss landscape on an N × N grid of the plane through A, B and θ_C (one "
        "evaluation of the split per point); 0: none",
    )  # fmt: skip
    group.add_argument(
        "--checkpoint-dir", default=None,
        help="with weight files: keep a checkpoint of θ_C here after each epoch and resume from "
        "it (runs keep theirs in the run store)",
    )  # fmt: skip


def curve_settings_from_args(args: argparse.Namespace):
    """The :class:`lmc.merge.CurveSettings` of the flags (``--seed`` seeds the curve too)."""
    from lmc.merge import CurveSettings

    return CurveSettings(
        kind=args.kind,
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        batch_size=args.curve_batch_size,
        optimizer=args.optimizer,
        lr=args.lr,
        momentum=args.momentum,
        weight_decay=args.weight_decay,
        schedule=args.schedule,
        seed=args.seed,
    )


def run(args: argparse.Namespace) -> int:
    from lmc.config import LmcError
    from lmc.models import module_device
    from lmc.pair import curve_pair, curve_summary, write_curve_pair
    from lmc.pair.curve import CONTROL_FOLDER, runs_description
    from lmc.pair.output import OUTPUT_MARKS
    from lmc.store import RunStore, check_output_place

    if args.plane < 0 or args.plane == 1:
        raise LmcError(f"--plane must be 0 (none) or at least 2 points per side, got {args.plane}")
    settings = interpolate.settings_from_args(args)
    curve = curve_settings_from_args(args)
    pair = load_inputs(args, "a curve")
    suffix = "" if args.align == "none" else f"__{args.align}"
    out = (
        Path(args.out)
        if args.out
        else Path("curves") / f"{pair.name_a}__{pair.name_b}__{curve.kind}{suffix}"
    )
    check_output_place(out, replaces=OUTPUT_MARKS)  # before the work, not after it
    checkpoints = getattr(args, "checkpoint_dir", None)
    if checkpoints is not None and Path(checkpoints).exists() and not Path(checkpoints).is_dir():
        raise LmcError(f"--checkpoint-dir {checkpoints} is a file; give a folder")
    store, describe = None, {}
    if pair.runs is not None:
        run_a, run_b = pair.runs
        store = RunStore(args.runs_dir) if args.runs_dir else RunStore()
        store.check_writable()
        describe = runs_description(run_a, run_b)
        if any(r.config.get("form") == "canonical" for r in (run_a, run_b)):
            # a canonical-form endpoint: the pair is measured (and θ_C stored) in that form
            describe["form"] = "canonical"
    else:
        describe = {
            "a": {"name": str(args.run_a)},
            "b": {"name": str(args.run_b)},
            "dataset": pair.dataset,
        }
    result = curve_pair(
        pair.model_a, pair.model_b, pair.data, curve.kind, settings, curve,
        plane=args.plane or None, store=store, describe=describe,
        checkpoint_dir=args.checkpoint_dir if store is None else None, quiet=args.quiet,
    )  # fmt: skip
    meta = {**pair.meta, "environment": environment_info(module_device(pair.model_a))}
    meta["out"] = str(out)
    summary = curve_summary(result, meta)
    if result.curve.run is None:
        summary["control_run"] = str(out / CONTROL_FOLDER)
    line, path = result.line.path, result.curve.path
    title = (
        f"A = {pair.name_a}   B = {pair.name_b}   align = {args.align}   {curve.kind}   "
        f"bn = {line.bn}"
    )
    written = write_curve_pair(result, out, summary, title=title)
    if args.json:
        emit_json(summary)
        return 0
    print(
        f"A = {pair.name_a}\nB = {pair.name_b}"
        + (f" (aligned: {args.align})" if args.align != "none" else "")
    )
    fit = result.curve.fit
    if fit is None:
        print(f"{curve.kind} control point reused from {result.curve.run.path}")
    else:
        losses = " → ".join(f"{h['train_loss']:.4f}" for h in fit.history[:1] + fit.history[-1:])
        print(f"{curve.kind} control point: {fit.epochs_done} epochs, training loss {losses}")
    print(f"bend distance ‖θ_C − mid‖ / ‖θ_A − θ_B‖ = {result.curve.bend_distance:.4f}")
    print(f"{path.num_examples} {args.split} examples; bn = {line.bn}")
    for name, res in (("line", line), (curve.kind, path)):
        print(f"{name}:")
        print(interpolate.format_table(res))
        print(interpolate._barrier_lines(res.barriers()))
    for name in written:
        print(f"wrote {name}", file=sys.stderr)
    return 0
