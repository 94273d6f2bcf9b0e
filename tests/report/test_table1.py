"""``table1`` on hand-made rows: hand-computed means and sample stds."""

from __future__ import annotations

import math

import pytest

from lmc.experiments.table import TABLE1_BARRIERS
from lmc.metrics import BARRIER_BY_KEY, barriers
from lmc.report import TABLE1_COLUMNS, table1


def _row(pair, lam, acc, loss, *, method="none", width=8, wd=0.01, **extra):
    return {
        "width": width,
        "weight_decay": wd,
        "pair": pair,
        "method": method,
        "lam": lam,
        "accuracy": acc,
        "loss": loss,
        **extra,
    }


def hand_rows():
    # pair 0: acc 0.9 -> 0.7 -> 0.8; pair 1: acc 1.0 -> 0.9 -> 0.9 (λ = 0, ½, 1)
    return [
        _row(0, 0.0, 0.9, 0.3),
        _row(
            0,
            0.5,
            0.7,
            0.6,
            midpoint_loss_barrier=0.2,
            ensemble_accuracy=0.95,
            inverse_temperature=4.0,
            ensemble_inverse_temperature=1.0,
            midpoint_accuracy_barrier=0.15,
        ),  # fmt: skip
        _row(0, 1.0, 0.8, 0.5),
        _row(1, 0.0, 1.0, 0.1),
        _row(
            1,
            0.5,
            0.9,
            0.5,
            midpoint_loss_barrier=0.4,
            ensemble_accuracy=0.85,
            inverse_temperature=2.0,
            ensemble_inverse_temperature=1.5,
            midpoint_accuracy_barrier=0.05,
        ),  # fmt: skip
        _row(1, 1.0, 0.9, 0.1),
    ]


def test_hand_computed_means_and_stds():
    (row,) = table1(hand_rows())
    assert list(row) == list(TABLE1_COLUMNS)
    assert (row["width"], row["weight_decay"], row["method"], row["pairs"]) == (8, 0.01, "none", 2)
    assert row["endpoint_accuracy_mean"] == pytest.approx(0.9)  # mean of 0.85 and 0.95
    assert row["merged_accuracy_mean"] == pytest.approx(0.8)
    assert row["merged_accuracy_std"] == pytest.approx(math.sqrt(0.02))  # 0.7, 0.9
    assert row["ensemble_accuracy_mean"] == pytest.approx(0.9)
    assert row["midpoint_accuracy_barrier_mean"] == pytest.approx(0.1)
    assert row["midpoint_accuracy_barrier_std"] == pytest.approx(math.sqrt(0.005))
    assert row["midpoint_loss_barrier_mean"] == pytest.approx(0.3)  # from the barrier column
    assert row["midpoint_loss_barrier_std"] == pytest.approx(math.sqrt(0.02))
    assert row["inverse_temperature_mean"] == pytest.approx(3.0)
    assert row["ensemble_inverse_temperature_mean"] == pytest.approx(1.25)
    assert math.isnan(row["calibrated_midpoint_loss_barrier_mean"])
    assert math.isnan(row["calibrated_midpoint_loss_barrier_std"])


def test_csv_text_cells_and_empty_barrier_columns():
    """Rows as the csv module yields them (all text, empty cells); empty barrier columns are
    computed from the λ = 0, ½, 1 rows with docs/science.md's formulas."""
    rows = []
    for r in hand_rows():
        r = {k: str(v) for k, v in r.items()}
        r["midpoint_loss_barrier"] = ""
        r["midpoint_accuracy_barrier"] = ""
        r["calibrated_midpoint_loss_barrier"] = ""
        rows.append(r)
    (row,) = table1(rows)
    # pair 0: 0.6 − ½(0.3 + 0.5) = 0.2; pair 1: 0.5 − ½(0.1 + 0.1) = 0.4
    assert row["midpoint_loss_barrier_mean"] == pytest.approx(0.3)
    assert row["midpoint_loss_barrier_std"] == pytest.approx(math.sqrt(0.02))
    # pair 0: ½(0.9 + 0.8) − 0.7 = 0.15; pair 1: ½(1.0 + 0.9) − 0.9 = 0.05
    assert row["midpoint_accuracy_barrier_mean"] == pytest.approx(0.1)
    assert row["width"] == 8 and isinstance(row["width"], int) and row["pairs"] == 2


def test_one_pair_has_zero_std_and_groups_are_separate():
    rows = [r for r in hand_rows() if r["pair"] == 0]
    rows += [dict(r, method="weight", accuracy=r["accuracy"] + 0.05) for r in rows]
    rows += [dict(r, weight_decay=1e-4) for r in rows if r["method"] == "none"]
    out = table1(rows)
    assert [(r["weight_decay"], r["method"]) for r in out] == [
        (0.01, "none"),
        (0.01, "weight"),
        (1e-4, "none"),
    ]
    for r in out:
        assert r["pairs"] == 1
        assert r["merged_accuracy_std"] == 0.0
        assert r["midpoint_loss_barrier_std"] == 0.0
    assert out[1]["merged_accuracy_mean"] == pytest.approx(0.75)
    assert out[0]["endpoint_accuracy_mean"] == pytest.approx(0.85)


def test_pairs_without_midpoint_are_not_counted():
    rows = hand_rows() + [_row(2, 0.0, 0.5, 1.0), _row(2, 1.0, 0.5, 1.0)]
    (row,) = table1(rows)
    assert row["pairs"] == 2 and row["merged_accuracy_mean"] == pytest.approx(0.8)


def test_table1_barriers_are_schema_keys_and_its_columns():
    for key in TABLE1_BARRIERS:
        assert key in BARRIER_BY_KEY
        assert {f"{key}_mean", f"{key}_std"} <= set(TABLE1_COLUMNS)


def test_missing_barrier_columns_are_lmc_metrics_barriers_of_the_path():
    """Results written without the barrier columns give the numbers lmc.metrics computes."""
    curves = {
        "lambdas": [0.0, 0.5, 1.0],
        "loss": [0.31, 0.83, 0.47],
        "accuracy": [0.91, 0.62, 0.87],
        "calibrated_loss": [0.29, 0.41, 0.33],
    }
    expected = barriers(curves)
    rows = [
        _row(0, lam, acc, loss, calibrated_loss=cal)
        for lam, loss, acc, cal in zip(*curves.values())
    ]
    (row,) = table1(rows)
    for key in TABLE1_BARRIERS:
        assert row[f"{key}_mean"] == expected[key]  # the same formula, bit for bit
        assert row[f"{key}_std"] == 0.0
