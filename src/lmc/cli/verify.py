"""Check stored runs against their manifests, like a file-system check.

Every file a run's manifest lists is read whole and its size and SHA-256 compared with what
was written; the config must hash to its folder's name. Each run is listed as ok, damaged
(with the file and what is wrong: its size or its hash), unverified (written before lmc kept
manifests; its weights still parse) or unfinished (lmc train resumes it). Nothing is changed:
`lmc train` retrains a damaged run by itself. Exit status 1 if any run is damaged, else 0.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from lmc.config import LmcError, progress

from .common import add_output_options, add_runs_dir_option, emit_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs",
        nargs="*",
        metavar="RUN",
        help="run folders, or their names in --runs-dir (default: every run in the store)",
    )
    add_runs_dir_option(parser)
    add_output_options(parser)


def _resolve(text: str, store: Path) -> Path:
    path = Path(text)
    if path.is_dir():
        return path
    if (store / text).is_dir():
        return store / text
    if path.exists():
        raise LmcError(f"{text} is not a folder: give a run folder or its name in {store}")
    raise LmcError(f"no run {text!r}: neither a folder nor a run in {store}")


def run(args: argparse.Namespace) -> int:
    from lmc.store import STATUSES, default_runs_dir, run_folders, verify_run

    store = Path(args.runs_dir) if args.runs_dir is not None else default_runs_dir()
    folders = [_resolve(t, store) for t in args.runs] if args.runs else run_folders(store)
    checks = [
        verify_run(p)
        for p in progress(
            folders, quiet=args.quiet or len(folders) < 2, desc="verifying", unit="run"
        )
    ]
    counts = Counter(c.status for c in checks)
    damaged = counts["damaged"]
    if args.json:
        emit_json(
            {
                "runs": [c.to_dict() for c in checks],
                "counts": {s: counts[s] for s in STATUSES},
                "damaged": [str(c.path) for c in checks if c.status == "damaged"],
            }
        )
        return 1 if damaged else 0
    width = max(len(s) for s in STATUSES)
    for check in checks:
        print(f"{check.status:<{width}}  {check.path}")
        if check.status == "unverified":
            print(f"{'':<{width}}    no manifest.json (written before lmc kept one)")
        for problem in check.problems:
            print(f"{'':<{width}}    {problem}")
    summary = ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s] or s == "damaged")
    print(f"{len(checks)} run{'s' if len(checks) != 1 else ''}: {summary}")
    return 1 if damaged else 0
