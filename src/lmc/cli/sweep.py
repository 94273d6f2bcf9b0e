"""Run an experiment described by a TOML file (or a packaged recipe name).

The study expands into train -> merge (align, interpolate, analyse) jobs. Finished training
runs come from the run store and finished merges from OUT/jobs, so an interrupted sweep
resumes where it stopped and a larger grid runs only what is new. Writes results.csv,
layers.csv, table1.csv, moments.json, spectra.json, stitch.csv (with [stitch] enabled) and
study.json into OUT, then the report (report.md, report.html) unless --no-report. The report
path is the last line on stdout. With --log tensorboard every model the sweep trains writes
TensorBoard events into LOG_DIR/<run folder name> (default LOG_DIR: OUT/tb); runs reused from
the store write none. A study whose top-level `experiment` key names another kind
(counterexample, merge-many, onset) runs that experiment instead and writes its own results
files (docs/studies.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lmc.config.threads import DEFAULT_THREADS

from .common import (
    add_data_options,
    add_device_option,
    add_log_options,
    add_runs_dir_option,
    emit_json,
    log_dir_from,
)
from .recipes import recipe_names


def add_execution_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--executor",
        default="local",
        choices=["local", "ray"],
        help="local: a process pool on this machine; ray: Ray tasks",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="local: parallel processes (default: CPU cores; 1 = in-process "
        "with progress per epoch); ray: CPUs of a locally started Ray",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=DEFAULT_THREADS,
        help=f"PyTorch threads per job (default: {DEFAULT_THREADS}, as lmc train). Results are "
        "bit-identical for any --workers at the same --threads; more threads speed up wide "
        "models (e.g. --workers 1 --threads 2 on 2 cores) but change float rounding, so compare "
        "results made with the same value",
    )
    parser.add_argument(
        "--address",
        default=None,
        help="ray: address of an existing cluster (e.g. auto, ray://host:10001)",
    )
    parser.add_argument(
        "--num-gpus",
        type=float,
        default=0.0,
        help="ray: GPUs per job (use with --device cuda) (default: 0)",
    )
    parser.add_argument("--no-report", action="store_true", help="do not write the report")
    parser.add_argument("--quiet", action="store_true", help="no progress bars or job lines")
    parser.add_argument(
        "--json", action="store_true", help="print study.json's contents as one JSON object"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "study",
        metavar="STUDY",
        help="a study TOML file, or a packaged recipe: " + ", ".join(recipe_names()),
    )
    parser.add_argument("--out", default=None, help="output folder (default: results/<study name>)")
    add_execution_options(parser)
    add_runs_dir_option(parser)
    add_log_options(parser, "OUT/tb")
    add_data_options(parser)
    add_device_option(parser)


def execute(study: dict, text: str | None, out: Path, args: argparse.Namespace) -> dict:
    """Run the study and (unless --no-report) write its report; shared with ``lmc demo``."""
    from lmc.experiments import RunOptions, make_executor, run_study

    from .common import device_from

    log_dir = log_dir_from(args, out / "tb")
    device = str(device_from(args))
    executor = make_executor(
        args.executor,
        workers=args.workers,
        address=args.address,
        num_gpus=args.num_gpus,
        threads=args.threads,
    )
    options = RunOptions(
        executor=executor,
        runs_dir=args.runs_dir,
        device=device,
        data_dir=args.data_dir,
        download=args.download,
        quiet=args.quiet,
        log_dir=log_dir,
        toml_text=text,
    )
    record = run_study(study, out, options)
    if not args.no_report:
        from lmc.report import write_report

        written = write_report(out)
        record["report_html"] = str(written["report_html"])
        record["report_md"] = str(written["report_md"])
    return record


def finish(record: dict, out: Path, args: argparse.Namespace) -> int:
    if args.json:
        emit_json(record)
        return 0
    jobs = record["jobs"]
    print(
        f"{record['name']}: {jobs['total']} jobs ({jobs['run']} run, {jobs['reused']} reused) "
        f"in {record['wall_seconds']:.0f} s; results in {out}"
    )
    # the main results file: results.csv, variants.csv, or another kind's record
    default = "variants.csv" if "variants" in record else "study.json"
    main_file = record.get("files", {}).get("results", default)
    print(record.get("report_html", out / main_file))
    return 0


def _control_notes(study: dict) -> list[str]:
    """A note per study (or variant) that lists a canonical method without its control."""
    from lmc.perm.methods import canonical_control_note

    notes = []
    for sub in [v["study"] for v in study.get("variants", [])] or [study]:
        merge, sweep = sub.get("merge") or {}, sub.get("sweep") or {}
        widened = sweep.get("width_ratio", 1) != 1
        note = canonical_control_note(merge.get("methods", []), widened=widened)
        if note and note not in notes:
            notes.append(note)
    return notes


def run(args: argparse.Namespace) -> int:
    from lmc.experiments import load_study

    study, text = load_study(args.study)
    if not args.quiet:
        for note in _control_notes(study):
            print(note, file=sys.stderr)
    out = Path(args.out or Path("results") / study["name"])
    return finish(execute(study, text, out, args), out, args)
