"""A width study's results.csv carries every barrier of the schema (``lmc.metrics.BARRIERS``),
from the job record or, for a record written before a barrier existed, from its path."""

from __future__ import annotations

import csv
import math

import pytest

from lmc.experiments.results import RESULT_COLUMNS, write_results
from lmc.metrics import BARRIER_KEYS, BARRIERS, barriers

STUDY = {"data": {"dataset": "digits", "split": "test"}, "model": {"name": "mlp"}}
CALIBRATED_CURVES = ("calibrated_loss", "heldout_loss")


def _result(calibrate: bool = True, drop: tuple[str, ...] = ()) -> dict:
    """One merge job's record on the grid 0, ½, 1 with its barriers (less ``drop``)."""
    path = {
        "lambdas": [0.0, 0.5, 1.0],
        "bn": "none",
        "calibrate": calibrate,
        "loss": [0.3, 0.9, 0.4],
        "accuracy": [0.9, 0.7, 0.88],
    }
    if calibrate:
        path.update(
            calibration_method="split",
            calibration_fraction=0.2,
            calibrated_loss=[0.28, 0.5, 0.35],
            heldout_loss=[0.31, 0.95, 0.41],
            inverse_temperature=[1.0, 2.0, 1.1],
            calibration_at_bound=[],
        )
    recorded = {k: v for k, v in barriers(path).items() if k not in drop}
    labels = {"width": 8, "weight_decay": 1e-3, "pair": 0, "method": "none"}
    return {"labels": labels, "path": path, "barriers": recorded}


def _read(path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


def test_every_barrier_of_the_schema_is_a_results_column(tmp_path):
    assert set(BARRIER_KEYS) <= set(RESULT_COLUMNS)
    result = _result()
    header, rows = _read(write_results(tmp_path, STUDY, [result])["results"])
    assert set(BARRIER_KEYS) <= set(header)
    assert len(rows) == 3
    expected = barriers(result["path"])
    for row in rows:
        for key in BARRIER_KEYS:
            assert float(row[key]) == pytest.approx(expected[key], rel=1e-12)


def test_a_record_written_before_a_barrier_existed_gets_it_from_its_path(tmp_path):
    old = ("mean_minus_min_accuracy", "heldout_loss_barrier", "heldout_midpoint_loss_barrier")
    result = _result(drop=old)
    header, rows = _read(write_results(tmp_path, STUDY, [result])["results"])
    expected = barriers(result["path"])
    # mean_minus_min_accuracy: ½(0.9 + 0.88) − 0.7 = 0.19; heldout midpoint: 0.95 − 0.36 = 0.59
    assert float(rows[0]["mean_minus_min_accuracy"]) == pytest.approx(0.19)
    assert float(rows[0]["heldout_midpoint_loss_barrier"]) == pytest.approx(0.59)
    for key in old:
        assert float(rows[-1][key]) == pytest.approx(expected[key], rel=1e-12)


def test_recorded_barriers_are_written_as_recorded(tmp_path):
    result = _result()
    result["barriers"]["loss_barrier"] = 123.0  # the record wins over a recomputation
    _, rows = _read(write_results(tmp_path, STUDY, [result])["results"])
    assert {float(r["loss_barrier"]) for r in rows} == {123.0}


def test_an_uncalibrated_path_leaves_its_calibrated_and_heldout_columns_empty(tmp_path):
    header, rows = _read(write_results(tmp_path, STUDY, [_result(calibrate=False)])["results"])
    for b in BARRIERS:
        assert b.key in header
        empty = b.curve in CALIBRATED_CURVES
        assert all((row[b.key] == "") == empty for row in rows), b.key
        if not empty:
            assert all(math.isfinite(float(row[b.key])) for row in rows)
