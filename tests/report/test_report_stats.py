"""The width study's report states its statistics as docs/science.md ("Statistics and
verdicts") defines them: Table 1 and the figures show mean ± the 95 % t-interval (not ± std),
and the paired comparisons give lmc.stats' verdicts on the per-pair values, none below 3
pairs. Per-pair values are read straight from the synthetic rows here, not through lmc."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
from scipy import stats as sps

from lmc import stats
from lmc.report import build, load_results
from lmc.report import figures as width_figures
from lmc.report.document import Heading, Table
from lmc.report.style import method_style

NONE, WEIGHT = method_style("none")[2], method_style("weight")[2]


def _per_pair(rows, column, *, width, wd, method, lam=0.5) -> dict[int, float]:
    return {
        r["pair"]: r[column]
        for r in rows
        if (r["width"], r["weight_decay"], r["method"]) == (width, wd, method)
        and math.isclose(r["lam"], lam)
    }


def _interval(values) -> tuple[float, float]:
    values = np.asarray(list(values), dtype=float)
    n = values.size
    return values.mean(), sps.t.ppf(0.975, n - 1) * values.std(ddof=1) / math.sqrt(n)


def _tables_after(blocks, heading: str) -> list[Table]:
    start = next(i for i, b in enumerate(blocks) if isinstance(b, Heading) and b.text == heading)
    out = []
    for b in blocks[start + 1 :]:
        if isinstance(b, Heading):
            break
        if isinstance(b, Table):
            out.append(b)
    return out


@pytest.fixture(scope="module")
def three_pairs(tmp_path_factory, writers):
    path = tmp_path_factory.mktemp("three") / "study"
    synthetic = writers.make_results(
        path, widths=(16, 64), weight_decays=(3e-3, 1e-4), pairs=3, extras=False
    )
    return synthetic, load_results(path)


def test_table1_shows_mean_and_95_percent_interval(synthetic, rendered, parse_html):
    doc = parse_html(rendered["report_html"])
    text = "".join(doc.text)
    assert "mean ± 95 % t-interval over n pairs" in text  # stated in every table's caption
    for width, wd, method in ((64, 3e-3, "none"), (256, 1e-4, "weight")):
        acc = _per_pair(synthetic.rows, "midpoint_accuracy_barrier", width=width, wd=wd,
                        method=method)  # fmt: skip
        mean, h = _interval(acc.values())
        assert f"{100 * mean:.3f} ± {100 * h:.3f}" in doc.cells
        std = np.std(list(acc.values()), ddof=1)
        assert f"{100 * mean:.3f} ± {100 * std:.3f}" not in doc.cells  # not ± std
        loss = _per_pair(synthetic.rows, "calibrated_midpoint_loss_barrier", width=width, wd=wd,
                         method=method)  # fmt: skip
        mean, h = _interval(loss.values())
        assert f"{mean:.3f} ± {h:.3f}" in doc.cells
    assert "the sample standard deviation over pairs" not in text


def test_two_pairs_give_no_verdict(rendered, parse_html):
    doc = parse_html(rendered["report_html"])
    text = "".join(doc.text)
    assert "Paired comparisons" in text
    assert "Only 2 pairs were run" in text
    verdicts = [c for c in doc.cells if "verdict" in c or "pair" in c or "detected" in c]
    assert verdicts and set(verdicts) == {"too few pairs (n = 2 < 3): no verdict"}


def test_paired_verdicts_of_methods_widths_and_weight_decays(three_pairs):
    synthetic, res = three_pairs
    blocks = build.paired_blocks(res)
    key = "calibrated_midpoint_loss_barrier"

    def cell(width, wd, method):
        return _per_pair(synthetic.rows, key, width=width, wd=wd, method=method)

    def expected(first, second):
        return stats.verdict(stats.compare(first, second))

    tables = _tables_after(blocks, "Alignment against no alignment")
    assert len(tables) == 2  # one per weight decay
    for table, wd in zip(tables, (3e-3, 1e-4)):
        assert table.header == ["width", f"{WEIGHT} − {NONE}"]
        for row, width in zip(table.rows, (16, 64)):
            none, weight = cell(width, wd, "none"), cell(width, wd, "weight")
            differences = [weight[p] - none[p] for p in range(3)]
            assert all(d < 0 for d in differences)  # the synthetic dip is smaller when aligned
            assert row == [str(width), expected(none, weight)]
            assert row[1].startswith("lower in every pair: −")
            mean, h = _interval(differences)
            assert stats.fmt_estimate(mean, h, signed=True) in row[1]

    (widths,) = _tables_after(blocks, "Widest against narrowest width")
    assert widths.header[-1] == "width 64 − width 16"
    for row, (wd, method) in zip(
        widths.rows, [(wd, m) for wd in (3e-3, 1e-4) for m in ("none", "weight")]
    ):
        assert row[-1] == expected(cell(16, wd, method), cell(64, wd, method))

    (decays,) = _tables_after(blocks, "Weight decay")
    for row, (width, method) in zip(
        decays.rows, [(w, m) for w in (16, 64) for m in ("none", "weight")]
    ):
        assert row[-1] == expected(cell(width, 3e-3, method), cell(width, 1e-4, method))
        assert row[-1].startswith("higher in ")  # weak weight decay raises the barrier


def test_nothing_to_compare_gives_no_section(tmp_path, make_synthetic):
    make_synthetic(tmp_path / "one", widths=(16,), weight_decays=(3e-3,), pairs=3,
                   methods=("none",), extras=False)  # fmt: skip
    assert build.paired_blocks(load_results(tmp_path / "one")) == []


def test_figure_error_bars_are_95_percent_intervals(three_pairs):
    synthetic, res = three_pairs
    x, mean, half = width_figures._series(res, "midpoint_loss_barrier", 3e-3, "none", 2.0)
    assert list(x) == [16.0, 64.0]
    for i, width in enumerate((16, 64)):
        values = _per_pair(synthetic.rows, "midpoint_loss_barrier", width=width, wd=3e-3,
                           method="none")  # fmt: skip
        m, h = _interval(values.values())
        assert mean[i] == pytest.approx(2 * m) and half[i] == pytest.approx(2 * h)


def test_pair_values_leave_out_an_undefined_calibration_as_table1_does(tmp_path, writers):
    path = tmp_path / "study"
    writers.make_results(path, widths=(16, 64), weight_decays=(3e-3,), pairs=3, extras=False)
    with open(path / "results.csv", newline="") as handle:
        reader = csv.DictReader(handle)
        columns = [*reader.fieldnames, "calibration_at_bound"]
        rows = list(reader)
    for r in rows:  # pair 1's λ = 0 calibration of width 16, no alignment: undefined
        at = (r["width"], r["method"], r["pair"], float(r["lam"]))
        r["calibration_at_bound"] = "1" if at == ("16", "none", "1", 0.0) else "0"
    with open(path / "results.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows({c: r.get(c, "") for c in columns} for r in rows)
    res = load_results(path)
    values = width_figures.pair_values(
        res, "calibrated_midpoint_loss_barrier", weight_decay=3e-3, method="none", width=16
    )
    assert sorted(values) == [0, 1, 2] and math.isnan(values[1])
    assert all(math.isfinite(values[p]) for p in (0, 2))
    uncalibrated = width_figures.pair_values(
        res, "midpoint_loss_barrier", weight_decay=3e-3, method="none", width=16
    )
    assert all(math.isfinite(v) for v in uncalibrated.values())
    row = next(r for r in build.table1(res.rows) if (r["width"], r["method"]) == (16, "none"))
    cell = stats.summarize(values)
    assert cell.n == 2 and row["calibrated_midpoint_loss_barrier_mean"] == pytest.approx(cell.mean)
    # pair 1 is left out of the paired comparison (weight matching has it)
    (table,) = _tables_after(build.paired_blocks(res), "Alignment against no alignment")
    assert table.rows[0][1] == "too few pairs (n = 2 < 3): no verdict"
