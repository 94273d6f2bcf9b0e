"""Per-run initialisation retention of every training run a width study used, as one CSV.

    python scripts/run_retention.py STUDY_DIR RUNS_DIR OUT.csv

Reads ``STUDY_DIR/jobs/merge-*.json`` (each names its two runs), loads each run from RUNS_DIR,
rebuilds its initial weights from its init seed and writes one row per (run, weight):
the study labels (width, weight_decay, pair, model side), the run's decay budget and decay
factor, and ``init_coef`` / ``init_share`` (docs/science.md, "Initialisation retention").
Used for runs whose merges were made before the retention columns reached layers.csv.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from lmc.analysis.retention import run_retention
from lmc.store import load_run


def main(study_dir: str, runs_dir: str, out_csv: str) -> None:
    seen: dict[str, dict] = {}
    for path in sorted(Path(study_dir, "jobs").glob("merge-*.json")):
        job = json.loads(path.read_text())
        labels = job["labels"]
        for side, name in zip(("A", "B"), (job["runs"]["a"], job["runs"]["b"])):
            seen.setdefault(name, {**labels, "model": side})
    rows = []
    for name, labels in sorted(seen.items()):
        found = run_retention(load_run(Path(runs_dir, name)), train_size=60000)
        for weight, values in found["layers"].items():
            rows.append(
                {
                    "width": labels["width"],
                    "weight_decay": labels["weight_decay"],
                    "pair": labels["pair"],
                    "model": labels["model"],
                    "run": name,
                    "decay_budget": found.get("decay_budget"),
                    "decay_factor": found.get("decay_factor"),
                    "weight": weight,
                    **values,
                }
            )
    with open(out_csv, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(seen)} runs, {len(rows)} rows -> {out_csv}")


if __name__ == "__main__":
    main(*sys.argv[1:])
