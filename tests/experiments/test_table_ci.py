"""table1.csv's 95 % interval columns (issue 31 item 3)."""

from __future__ import annotations

import math

import pytest

from lmc.experiments.table import TABLE1_BARRIERS, TABLE1_COLUMNS, ci95_half_width


def test_the_half_width_is_the_t_interval():
    # three values 1, 2, 3: std 1, t_{0.975, 2} = 4.302652729749464 (a table value)
    assert ci95_half_width(1.0, 3) == pytest.approx(4.302652729749464 / math.sqrt(3), rel=1e-12)
    assert math.isnan(ci95_half_width(0.0, 1)) and math.isnan(ci95_half_width(math.nan, 4))


def test_every_barrier_and_the_merged_accuracy_have_an_interval_column():
    for key in (*TABLE1_BARRIERS, "merged_accuracy"):
        i = TABLE1_COLUMNS.index(f"{key}_mean")
        assert TABLE1_COLUMNS[i + 1 : i + 3] == (f"{key}_std", f"{key}_ci95")
