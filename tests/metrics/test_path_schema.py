"""One path schema for the line and the curves: a path result names its kind, results rows
carry it in ``path`` (a row or record without it is the line), and Table 1 keeps a line's row
as it was before curves while giving each curve its own."""

from __future__ import annotations

import math

import pytest

from lmc.experiments.results import path_rows
from lmc.experiments.table import TABLE1_COLUMNS, table1
from lmc.merge.curves import Curve
from lmc.metrics import evaluate_path
from lmc.metrics.barriers import PATH_KEY, barriers, path_kind_of
from lmc.metrics.curve_path import evaluate_curve

STUDY = {"data": {"dataset": "digits", "split": "test"}, "model": {"name": "mlp"}}


@pytest.mark.parametrize(
    "record, kind",
    [
        ({}, "line"),
        ({"path": None}, "line"),
        ({"path": ""}, "line"),
        ({"path": math.nan}, "line"),
        ({"path": "nan"}, "line"),
        ({"path": "bezier"}, "bezier"),
        ({"path": " chain "}, "chain"),
    ],
)
def test_a_record_without_a_path_is_the_line(record, kind):
    assert path_kind_of(record) == kind


def test_path_results_name_their_kind(mlp_pair, digits):
    a, b = mlp_pair
    x, y = digits[2], digits[3]
    line = evaluate_path(a, b, x, y, 3)
    assert line.path == "line" and line.to_dict()[PATH_KEY] == "line"
    for kind in ("line", "bezier", "chain"):
        curve = Curve(kind, a.state_dict(), b.state_dict())
        assert evaluate_curve(curve, a, x, y, 3).path == kind


def _path(losses: list[float], accuracies: list[float], kind: str | None) -> dict:
    path = {
        "lambdas": [0.0, 0.5, 1.0],
        "loss": losses,
        "accuracy": accuracies,
        "ensemble_loss": losses,
        "ensemble_accuracy": accuracies,
        "logit_norm": [1.0, 1.0, 1.0],
        "bn": "none",
        "calibrate": False,
    }
    if kind is not None:
        path["path"] = kind
    return path


def _job(pair: int, line_mid: float, curve_mid: float | None, legacy: bool = False) -> dict:
    line = _path([0.5, line_mid, 0.7], [0.9, 0.6, 0.9], None if legacy else "line")
    job = {
        "labels": {"width": 16, "weight_decay": 0.0, "pair": pair, "method": "none"},
        "path": line,
        "barriers": barriers(line),
    }
    if curve_mid is not None:
        curve = _path([0.5, curve_mid, 0.7], [0.9, 0.85, 0.9], "bezier")
        job["curves"] = [
            {
                "kind": "bezier",
                "path": curve,
                "barriers": barriers(curve),
                "bend_distance": 0.1 * (pair + 1),
            }
        ]
    return job


def test_results_rows_carry_the_path_and_table1_groups_by_it():
    jobs = [_job(0, 1.5, 0.8), _job(1, 1.7, 0.6)]
    rows = [row for job in jobs for row in path_rows(STUDY, job)]
    assert [r[PATH_KEY] for r in rows] == ["line"] * 3 + ["bezier"] * 3 + ["line"] * 3 + [
        "bezier"
    ] * 3
    bezier_mid = [r for r in rows if r[PATH_KEY] == "bezier" and r["lam"] == 0.5]
    # the curve's barrier is its own: L(½) − ½(L_0 + L_1) of its losses
    assert [r["midpoint_loss_barrier"] for r in bezier_mid] == pytest.approx([0.8 - 0.6, 0.6 - 0.6])
    assert [r["bend_distance"] for r in bezier_mid] == pytest.approx([0.1, 0.2])
    assert all("bend_distance" not in r for r in rows if r[PATH_KEY] == "line")
    t1 = table1(rows)
    assert len(t1) == 2
    line_row, curve_row = t1  # the line first
    assert list(line_row) == list(TABLE1_COLUMNS)  # a line's row as before curves
    assert curve_row[PATH_KEY] == "bezier"
    assert line_row["midpoint_loss_barrier_mean"] == pytest.approx(((1.5 - 0.6) + (1.7 - 0.6)) / 2)
    assert curve_row["midpoint_loss_barrier_mean"] == pytest.approx(0.1)


def test_a_job_recorded_before_curves_gives_line_rows():
    rows = path_rows(STUDY, _job(0, 1.5, None, legacy=True))
    assert [r[PATH_KEY] for r in rows] == ["line"] * 3
    # results rows without the column (written before curves) are lines to Table 1
    for r in rows:
        del r[PATH_KEY]
    (row,) = table1(rows)
    assert PATH_KEY not in row
