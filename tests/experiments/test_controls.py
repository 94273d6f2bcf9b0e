"""The random-direction control in a width study (issue 31 item 2): ``[merge] methods`` may
list ``random-direction``, whose rows are the path A -> A + ||B - A|| u of the same pair."""

from __future__ import annotations

import csv

import pytest

from lmc.config import LmcError
from lmc.experiments import LocalExecutor, resolve, run_study

STUDY = {
    "name": "controls",
    "data": {"dataset": "digits"},
    "model": {"name": "mlp", "depth": 1},
    "sweep": {"widths": [16], "weight_decays": [3e-3], "pairs": 1},
    "train": {"epochs": 1},
    "merge": {"methods": ["none", "random-direction", "onepass"], "lambdas": 3},
    "analysis": {"max_examples": 64},
}


def test_the_random_direction_control_runs_beside_the_methods(tmp_path):
    record = run_study(resolve(STUDY), tmp_path / "o", executor=LocalExecutor(1),
                       runs_dir=tmp_path / "runs", quiet=True)  # fmt: skip
    assert record["status"] == "finished"
    rows = list(csv.DictReader((tmp_path / "o" / "results.csv").open()))
    by = {(r["method"], float(r["lam"])): r for r in rows}
    assert {m for m, _ in by} == {"none", "random-direction", "onepass"}
    # the same A at lambda = 0; another end at lambda = 1 (A moved by |B - A| at random)
    assert by[("random-direction", 0.0)]["loss"] == by[("none", 0.0)]["loss"]
    assert by[("random-direction", 1.0)]["loss"] != by[("none", 1.0)]["loss"]
    layers = list(csv.DictReader((tmp_path / "o" / "layers.csv").open()))
    assert {r["method"] for r in layers} == {"none", "onepass"}  # the control has no analysis
    table = {r["method"] for r in csv.DictReader((tmp_path / "o" / "table1.csv").open())}
    assert table == {"none", "random-direction", "onepass"}


def test_an_unknown_entry_names_the_control_among_the_choices():
    with pytest.raises(LmcError, match="random-direction"):
        resolve({**STUDY, "merge": {"methods": ["nope"]}})
