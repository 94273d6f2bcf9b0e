"""Write report.md and a self-contained report.html (figures embedded) from a results folder
written by `lmc sweep`: Table 1 (barriers at λ = ½, mean ± 95 % t-interval over pairs),
accuracy, barriers and inverse temperature against width, interpolation curves, layerwise
cosines, second moments, spectra, the weight-decay ablation, stitching (with [stitch] enabled),
and the exact config, versions and timing. A folder of another experiment kind (counterexample,
merge-many, onset; its study.json says which) gets that kind's report. Never trains or evaluates
a model. Prints the path of report.html last."""

from __future__ import annotations

import argparse
import sys

from .common import add_output_options, emit_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "results_dir",
        metavar="RESULTS_DIR",
        help="folder written by `lmc sweep` (results.csv, or another kind's files)",
    )
    parser.add_argument(
        "--out", default=None, help="folder for the report and figures/ (None means RESULTS_DIR)"
    )
    parser.add_argument(
        "--title",
        default=None,
        help="report title (None means one made from the dataset, model and study name)",
    )
    add_output_options(parser)


def run(args: argparse.Namespace) -> int:
    from lmc.report import write_report

    paths = write_report(
        args.results_dir, out_dir=args.out, title=args.title, quiet=args.quiet or args.json
    )
    if args.json:
        emit_json(paths)
        return 0
    if not args.quiet:
        print(f"wrote {paths['report_md']}", file=sys.stderr)
        print(f"wrote {len(paths['figures'])} figures under the figures/ folder", file=sys.stderr)
    print(paths["report_html"])
    return 0
