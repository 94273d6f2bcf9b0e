"""A width study's layers.csv carries the retention diagnostic (docs/science.md,
"Initialisation retention"), rebuilt from each run's init seed, and each merge job records its
endpoints' decay budget."""

from __future__ import annotations

import csv
import json

import pytest

from lmc.experiments import LocalExecutor, resolve, run_study


@pytest.fixture
def study(tiny_study) -> dict:
    """The tiny study at width 16, analysed at λ = 0.5 on 64 examples."""
    return tiny_study(
        "tiny-retention",
        sweep={"widths": [16]},
        analysis={"enabled": True, "lambdas": [0.5], "max_examples": 64},
    )


def test_layers_csv_has_retention_and_jobs_record_the_decay_budget(tmp_path, study):
    out = tmp_path / "out"
    run_study(
        resolve(study),
        out,
        executor=LocalExecutor(workers=1),
        runs_dir=str(tmp_path / "runs"),
        quiet=True,
    )
    rows = list(csv.DictReader(open(out / "layers.csv")))
    weighted = [r for r in rows if r.get("init_share_a")]
    assert weighted, "no layer row has the retention columns filled"
    for row in weighted:
        for side in ("a", "b"):
            share = float(row[f"init_share_{side}"])
            assert 0.0 < share <= 1.0  # one epoch leaves most of the initialisation
    (job,) = [json.loads(p.read_text()) for p in (out / "jobs").glob("merge-*.json")]
    budgets = job["endpoint_decay_budget"]
    assert len(budgets) == 2 and all(b > 0 for b in budgets)
