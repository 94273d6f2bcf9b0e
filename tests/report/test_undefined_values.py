"""β values on the bound of the search are undefined: left out of Table 1, of every figure's
data and of every mean, and named in the report's "Undefined values" section, even for
results written before results.csv flagged them (the bound's value, 1e4, recorded as a β)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from lmc.metrics import BETA_MAX
from lmc.report import figures as F
from lmc.report import load_results, table1, write_report
from lmc.report.build import fmt_beta

WD = 3e-3
# (width, method, pair, lam): cells whose β an old lmc recorded as the bound
BOUND = {
    (256, "none", 1, 0.0), (256, "none", 1, 1.0), (256, "weight", 1, 0.0),
    (256, "weight", 1, 1.0), (16, "none", 0, 0.5),
}  # fmt: skip
CALIBRATED_BARRIERS = (
    "calibrated_loss_barrier",
    "calibrated_midpoint_loss_barrier",
    "calibrated_max_minus_mean_loss",
)


def _key(r: dict) -> tuple:
    return (r["width"], r["method"], r["pair"], r["lam"])


@pytest.fixture(scope="module")
def legacy(tmp_path_factory, writers):
    """A results folder as lmc wrote it before undefined values were dropped: β = 1e4 at the
    bound (the ensemble's too where λ is an endpoint, the ensemble being that model), the
    calibrated loss and barriers NaN, no flag columns, and a table1.csv averaging the 1e4s."""
    path = tmp_path_factory.mktemp("legacy") / "study"
    synthetic = writers.make_results(
        path, widths=(16, 64, 256), weight_decays=(WD,), pairs=2, lams=5, extras=False
    )
    rows = [dict(r) for r in synthetic.rows]
    paths = {(r["width"], r["method"], r["pair"]) for r in rows if _key(r) in BOUND}
    for r in rows:
        if _key(r) in BOUND:
            r["inverse_temperature"] = BETA_MAX
            r["calibrated_loss"] = math.nan
            if r["lam"] in (0.0, 1.0):
                r["ensemble_inverse_temperature"] = BETA_MAX
                r["ensemble_calibrated_loss"] = math.nan
        if (r["width"], r["method"], r["pair"]) in paths:
            for k in CALIBRATED_BARRIERS:
                r[k] = math.nan
    writers.write_csv(path / "results.csv", list(writers.result_columns), rows)
    # the old table1.csv: β means with the bound's 1e4 averaged in
    stale = []
    for row in table1([{**r, "inverse_temperature": 1.0} for r in rows]):
        mids = [
            r["inverse_temperature"]
            for r in rows
            if (r["width"], r["method"], r["lam"]) == (row["width"], row["method"], 0.5)
        ]
        stale.append({**row, "inverse_temperature_mean": float(np.mean(mids))})
    with open(path / "table1.csv", "w", newline="") as handle:
        columns = [c for c in stale[0] if c != "undefined_calibration_pairs"]
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(stale)
    report = write_report(path, out_dir=tmp_path_factory.mktemp("legacy-report"))
    return path, rows, stale, report


def _defined_mean(rows, column, width, method, lam):
    values = [
        r[column]
        for r in rows
        if (r["width"], r["method"], r["lam"]) == (width, method, lam) and r[column] < BETA_MAX / 2
    ]
    return float(np.mean(values)) if values else math.nan


def test_the_loaded_rows_drop_and_list_the_bound_values(legacy):
    path, rows, _, _ = legacy
    res = load_results(path)
    cells = {(c["width"], c["method"], c["pair"], c["lam"], c["model"]) for c in res.undefined}
    merged = {(*k, "merged") for k in BOUND}
    ensemble = {(*k, "ensemble") for k in BOUND if k[3] in (0.0, 1.0)}
    assert cells == merged | ensemble
    for r in res.rows:
        for column in ("inverse_temperature", "ensemble_inverse_temperature"):
            assert math.isnan(r[column]) or r[column] < BETA_MAX / 2
    assert res.calibrations == [("split", None)]  # written before the calibration column


def test_table1_means_leave_the_bound_out(legacy):
    _, rows, _, _ = legacy
    for row in table1(rows):  # straight from the legacy rows, 1e4 and all
        width, method = row["width"], row["method"]
        want = _defined_mean(rows, "inverse_temperature", width, method, 0.5)
        got = row["inverse_temperature_mean"]
        assert (math.isnan(want) and math.isnan(got)) or got == pytest.approx(want)
        undefined = {k[2] for k in BOUND if k[:2] == (width, method)}
        assert row["undefined_calibration_pairs"] == len(undefined)
    (row,) = [r for r in table1(rows) if (r["width"], r["method"]) == (16, "none")]
    assert row["inverse_temperature_mean"] < 100  # pair 1's β alone, not (β + 1e4) / 2


def test_figure_data_leave_the_bound_out(legacy):
    path, rows, _, _ = legacy
    res = load_results(path)
    for method in res.methods:
        for column in ("inverse_temperature", "ensemble_inverse_temperature"):
            widths, mean, _ = F._series(res, column, WD, method)
            for w, m in zip(widths, mean):
                want = _defined_mean(rows, column, w, method, 0.5)
                assert (math.isnan(want) and math.isnan(m)) or m == pytest.approx(want)
        # the endpoints' line that spiked to ~2.5e3: width 256 now averages pair 0 alone
        widths, mean, _ = F._endpoint_series(res, "inverse_temperature", WD, method)
        assert np.all(mean[np.isfinite(mean)] < 100)
        ends = [
            r["inverse_temperature"]
            for r in rows
            if (r["width"], r["method"], r["pair"]) == (256, method, 0) and r["lam"] in (0.0, 1.0)
        ]
        assert mean[list(widths).index(256)] == pytest.approx(np.mean(ends))
        for lam in res.lams:  # the interpolation curves' data
            kw = dict(weight_decay=WD, method=method, width=256, lam=lam)
            m, _, n = res.stat("calibrated_loss", **kw)
            assert n == (1 if lam in (0.0, 1.0) else 2) and math.isfinite(m)


def test_the_report_names_the_cells_and_ignores_the_stale_means(legacy):
    _, rows, stale, report = legacy
    md = Path(report["report_md"]).read_text()
    assert "## Undefined values" in md
    assert f"in **{len(BOUND) + 4}** of {2 * len(rows)} calibrated cells" in md
    assert "(5 merged models θ(λ), 4 ensembles)" in md
    for label in ("no permutation", "weight matching"):
        assert f"| 0.003 | 256 | {label} | 1 | merged θ(λ) | 0, 1 | 2 |" in md
        assert f"| 0.003 | 256 | {label} | 1 | ensemble | 0, 1 | 2 |" in md
    assert "| 0.003 | 16 | no permutation | 0 | merged θ(λ) | 0.5 | 1 |" in md
    assert "Cross-fitted calibration" in md  # the advice for a split calibration
    # Table 1 shows the clean β means, not table1.csv's averages of 1e4
    polluted = [r for r in stale if r["inverse_temperature_mean"] > 100]
    assert polluted
    for row in polluted:
        assert f"| {fmt_beta(row['inverse_temperature_mean'])} |" not in md
    clean = _defined_mean(rows, "inverse_temperature", 16, "none", 0.5)
    assert f"| {fmt_beta(clean)} |" in md
    assert "pairs with undefined calibration" in md


def test_a_clean_calibrated_study_says_nothing_is_undefined(rendered):
    md = Path(rendered["report_md"]).read_text()
    assert "No calibration hit the bound of its β search" in md
    assert "pairs with undefined calibration" not in md
    assert "split: β fitted on a random 20% of the split" in md
