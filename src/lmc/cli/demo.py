"""The width study on the offline digits dataset, end to end, with a report.

Runs the packaged recipe lewc-digits-mlp (MLPs of widths 16 to 1024, three independent pairs per
width, plain averaging and weight matching, weight decay 3e-3 and 1e-4): trains the models,
merges each pair along the linear path with temperature calibration, analyses every layer
(LEWC, weak additivity, reciprocal orthogonality), and writes report.md and report.html with
figures into --out. Takes a few minutes on a 2-core CPU; re-running reuses finished work.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import add_device_option
from .sweep import add_execution_options, execute, finish

RECIPE = "lewc-digits-mlp"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", default="lmc-demo", help="output folder for results and report (runs in OUT/runs)"
    )
    parser.add_argument("--runs-dir", default=None, help="the run store (default: OUT/runs)")
    add_execution_options(parser)
    add_device_option(parser)


def run(args: argparse.Namespace) -> int:
    from lmc.experiments import load_study

    study, text = load_study(RECIPE)
    out = Path(args.out)
    args.runs_dir = args.runs_dir or str(out / "runs")
    args.data_dir, args.download = None, False
    return finish(execute(study, text, out, args), out, args)
