"""benchmarks/curve_fit.py still runs (it is run on demand): a row per width with both epochs'
seconds and their ratio, for an MLP and a GPT."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "extra",
    [
        ["--widths", "8,16", "--train-size", "64", "--batch-size", "16"],
        ["--model", "gpt", "--widths", "8", "--train-size", "16", "--batch-size", "8",
         "--context", "6", "--vocab", "11", "--heads", "2", "--depth", "1"],
    ],
)  # fmt: skip
def test_curve_fit_benchmark_prints_the_ratio_per_width(run_benchmark, extra):
    lines = run_benchmark("curve_fit", "--repeats", "1", "--kind", "chain", *extra).splitlines()
    assert "steps/epoch" in lines[0] and "curve chain" in lines[0]
    assert lines[1].split()[-1] == "curve/train"
    rows = [line.split() for line in lines[2:]]
    widths = extra[extra.index("--widths") + 1].split(",")
    assert [r[0] for r in rows] == widths
    for _width, params, train, curve, ratio in rows:
        assert int(params) > 0 and float(train) > 0 and float(curve) > 0
        assert ratio.endswith("x") and float(ratio[:-1]) > 0
