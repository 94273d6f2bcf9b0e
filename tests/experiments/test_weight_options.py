"""Weight matching's start and restarts in a study ([merge] weight_init, weight_restarts) and
in `lmc align` (--init, --restarts): they reach the matching, and at their defaults they stay
out of every identity, so earlier merges and aligned runs are reused."""

from __future__ import annotations

import copy
import json

import pytest

from lmc.config import LmcError
from lmc.data import load
from lmc.experiments import LocalExecutor, expand, resolve, run_study

TINY = {
    "name": "tiny-wm",
    "data": {"dataset": "digits"},
    "model": {"name": "mlp", "depth": 2},
    "sweep": {"widths": [16], "weight_decays": [3e-3], "pairs": 1},
    "train": {"epochs": 2},
    "merge": {"methods": ["weight"], "lambdas": 3, "calibrate": False},
    "analysis": {"enabled": False},
}


def _with(**merge):
    raw = copy.deepcopy(TINY)
    raw["merge"].update(merge)
    return raw


def test_defaults_stay_out_of_the_merge_id_and_other_values_enter_it():
    data = load("digits")
    ids = {}
    for key, raw in {
        "plain": TINY,
        "defaults": _with(weight_init="identity", weight_restarts=1),
        "onepass": _with(weight_init="onepass"),
        "restarts": _with(weight_restarts=3),
    }.items():
        _, merges = expand(resolve(raw), data)
        ids[key] = merges[0]["id"]
    assert ids["plain"] == ids["defaults"]
    assert len({ids["plain"], ids["onepass"], ids["restarts"]}) == 3
    with pytest.raises(LmcError, match="'merge.weight_init'"):
        resolve(_with(weight_init="activation"))
    with pytest.raises(LmcError, match="'merge.weight_restarts'"):
        resolve(_with(weight_restarts=0))


def test_a_sweep_runs_weight_matching_with_the_asked_start_and_restarts(tmp_path):
    study = resolve(_with(weight_init="onepass", weight_restarts=3))
    record = run_study(study, tmp_path / "o", executor=LocalExecutor(1),
                       runs_dir=tmp_path / "runs", quiet=True)  # fmt: skip
    (job,) = (tmp_path / "o" / "jobs").glob("merge-*.json")
    align = json.loads(job.read_text())["align"]
    assert align["settings"]["init"] == "onepass" and align["settings"]["restarts"] == 3
    assert len(align["restart_objectives"]) == 3
    assert align["objective_after"] == pytest.approx(max(align["restart_objectives"]))
    assert record["status"] == "finished"
