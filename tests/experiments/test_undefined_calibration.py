"""A real (tiny) sweep whose calibration hits the bound of its β search: no table, figure data
or mean includes a bound value, and the report names every affected cell.

The synthetic task is easy enough that several models classify the 60-example test split
(almost) perfectly: their β runs to the bound, so their calibration is undefined; the narrow
models stay below that, so defined and undefined cells are mixed.
"""

from __future__ import annotations

import csv
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from lmc.config import LmcWarning
from lmc.experiments import LocalExecutor, resolve, run_study
from lmc.metrics import BETA_MAX, BETA_MIN
from lmc.report import figures as F
from lmc.report import load_results, write_report
from lmc.report.style import fmt_wd, fmt_width, method_style

STUDY = {
    "name": "bound",
    "data": {
        "dataset": "synthetic",
        "options": {
            "input_shape": [8],
            "num_classes": 3,
            "train_size": 240,
            "test_size": 60,
            "separation": 9.0,
        },
    },
    "model": {"name": "mlp", "depth": 1},
    "sweep": {"widths": [8, 32], "weight_decays": [3e-3], "pairs": 2},
    "train": {"epochs": 8},
    "merge": {"methods": ["none", "weight"], "lambdas": 3},
    "analysis": {"enabled": False},
}
WD = 3e-3


def _on_bound(value: float) -> bool:
    return value >= BETA_MAX * (1 - 1e-6) or value <= BETA_MIN * (1 + 1e-6)


def _float(text: str) -> float:
    return math.nan if text in ("", "nan") else float(text)


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return float(np.mean(finite)) if finite else math.nan


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9, abs=1e-12)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("bound") / "out"
    with warnings.catch_warnings():  # evaluate_path warns at the bound (tested in metrics)
        warnings.simplefilter("ignore", LmcWarning)
        run_study(
            resolve(STUDY), out, executor=LocalExecutor(1), runs_dir=out.parent / "runs", quiet=True
        )
    paths = write_report(out)
    with open(out / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    with open(out / "table1.csv", newline="") as handle:
        t1 = list(csv.DictReader(handle))
    return out, rows, t1, paths


def _undefined(rows: list[dict]) -> list[tuple]:
    """(width, method, pair, lam, model) of every flagged cell of results.csv."""
    cells = []
    for r in rows:
        for flag, model in (
            ("calibration_at_bound", "merged"),
            ("ensemble_calibration_at_bound", "ensemble"),
        ):
            if r[flag] == "1":
                cells.append(
                    (float(r["width"]), r["method"], int(r["pair"]), float(r["lam"]), model)
                )
    return cells


def test_results_csv_never_holds_a_bound_value(swept):
    out, rows, _, _ = swept
    undefined = _undefined(rows)
    assert undefined, "the study was built to hit the bound"
    assert any(r["calibration_at_bound"] == "0" for r in rows), "and to keep some β defined"
    for r in rows:
        assert r["calibration"] == "crossfit" and r["calibration_folds"] == "5"  # auto, 60 ex.
        assert r["calibration_fraction"] == ""
        for flag, beta, loss in (
            ("calibration_at_bound", "inverse_temperature", "calibrated_loss"),
            (
                "ensemble_calibration_at_bound",
                "ensemble_inverse_temperature",
                "ensemble_calibrated_loss",
            ),
        ):
            assert r[flag] in ("0", "1")
            if r[flag] == "1":
                assert r[beta] == "" and r[loss] == ""  # undefined: empty, never 1e4
            else:
                assert not _on_bound(float(r[beta])) and math.isfinite(float(r[loss]))
    # each merge job records the calibration it used
    for summary in (out / "pairs").glob("*/summary.json"):
        data = json.loads(summary.read_text())
        assert data["calibration_method"] == "crossfit" and data["calibration_folds"] == 5


def test_table1_means_leave_undefined_values_out(swept):
    _, rows, t1, _ = swept
    assert t1
    for row in t1:
        width, method = float(row["width"]), row["method"]
        by_pair: dict[int, dict[float, dict]] = {}
        for r in rows:
            if float(r["width"]) == width and r["method"] == method:
                by_pair.setdefault(int(r["pair"]), {})[float(r["lam"])] = r
        betas = [_float(p[0.5]["inverse_temperature"]) for p in by_pair.values()]
        ens = [_float(p[0.5]["ensemble_inverse_temperature"]) for p in by_pair.values()]
        barriers = []
        undefined_pairs = 0
        for p in by_pair.values():
            flags = [p[lam]["calibration_at_bound"] == "1" for lam in (0.0, 0.5, 1.0)]
            undefined_pairs += any(flags) or p[0.5]["ensemble_calibration_at_bound"] == "1"
            losses = [_float(p[lam]["calibrated_loss"]) for lam in (0.0, 0.5, 1.0)]
            barriers.append(math.nan if any(flags) else losses[1] - 0.5 * (losses[0] + losses[2]))
        assert _same(_float(row["inverse_temperature_mean"]), _mean(betas))
        assert _same(_float(row["ensemble_inverse_temperature_mean"]), _mean(ens))
        assert _same(_float(row["calibrated_midpoint_loss_barrier_mean"]), _mean(barriers))
        assert int(row["undefined_calibration_pairs"]) == undefined_pairs
        for column in ("inverse_temperature_mean", "ensemble_inverse_temperature_mean"):
            value = _float(row[column])
            assert math.isnan(value) or not _on_bound(value)
    assert sum(int(r["undefined_calibration_pairs"]) for r in t1) > 0


def test_figure_data_leave_undefined_values_out(swept):
    out, rows, _, _ = swept
    res = load_results(out)
    assert len(res.undefined) == len(_undefined(rows))
    for method in res.methods:
        for column in ("inverse_temperature", "ensemble_inverse_temperature"):
            widths, mean, _ = F._series(res, column, WD, method)
            for w, m in zip(widths, mean):
                values = [
                    _float(r[column])
                    for r in rows
                    if float(r["width"]) == w and r["method"] == method and float(r["lam"]) == 0.5
                ]
                assert _same(m, _mean(values))
                assert math.isnan(m) or not _on_bound(m)
        # the endpoints' line: ½(β(0) + β(1)) per pair, pairs with an undefined β left out
        widths, mean, _ = F._endpoint_series(res, "inverse_temperature", WD, method)
        for w, m in zip(widths, mean):
            per_pair = []
            for pair in res.pairs:
                path = {
                    float(r["lam"]): _float(r["inverse_temperature"])
                    for r in rows
                    if float(r["width"]) == w and r["method"] == method and int(r["pair"]) == pair
                }
                per_pair.append(0.5 * (path[0.0] + path[1.0]))
            assert _same(m, _mean(per_pair))
            assert math.isnan(m) or m < BETA_MAX / 4
    for r in res.rows:  # every value a figure can draw
        for column in ("inverse_temperature", "ensemble_inverse_temperature"):
            assert math.isnan(r[column]) or not _on_bound(r[column])


def test_report_names_the_affected_cells(swept):
    _, rows, _, paths = swept
    md = Path(paths["report_md"]).read_text()
    html = Path(paths["report_html"]).read_text()
    undefined = _undefined(rows)
    assert "## Undefined values" in md and "Undefined values" in html
    scored = 2 * len(rows)
    assert f"in **{len(undefined)}** of {scored} calibrated cells" in md
    merged = sum(c[-1] == "merged" for c in undefined)
    assert f"({merged} merged models θ(λ), {len(undefined) - merged} ensembles)" in md
    assert "cross-fitted over 5 folds" in md  # which calibration the results used
    groups: dict[tuple, list[float]] = {}
    for width, method, pair, lam, model in undefined:
        groups.setdefault((width, method, pair, model), []).append(lam)
    for (width, method, pair, model), lams in groups.items():
        cells = [
            fmt_wd(WD),
            fmt_width(width),
            method_style(method)[2],
            str(pair),
            "merged θ(λ)" if model == "merged" else "ensemble",
            ", ".join(f"{v:g}" for v in sorted(lams)),
            str(len(lams)),
        ]
        assert "| " + " | ".join(cells) + " |" in md, cells
    assert md.count("merged θ(λ) |") + md.count("ensemble |") >= len(groups)
    assert "pairs with undefined calibration" in md  # Table 1 counts the pairs left out
