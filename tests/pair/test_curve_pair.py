"""A pair's curve beside its line (lmc.pair.curve_pair, the library call of ``lmc curve``), and
the layerwise analysis at any point of a curve (a function giving the state at t, passed as
the analysis' merge function)."""

from __future__ import annotations

import json

import pytest
import torch

import lmc.models
from lmc.analysis import analyze
from lmc.merge import CurveSettings, load_curve
from lmc.merge.curves import Curve, curve_merge_fn, midpoint_control
from lmc.metrics import PathSettings
from lmc.pair import PairSettings, curve_pair, fit_pair_curve, run_pair, write_curve_pair
from lmc.store import load_run

FAST = CurveSettings(kind="bezier", epochs=1, steps_per_epoch=4, batch_size=64)


def _mlp(seed: int):
    return lmc.models.build("mlp", seed=seed, input_size=64, width=12, depth=2).eval()


def test_the_analysis_along_a_chain_through_the_midpoint_is_the_lines(digits):
    a, b = _mlp(0), _mlp(1)
    x = digits.x_test[:200]
    control = midpoint_control(a.state_dict(), b.state_dict())
    merge = curve_merge_fn("chain", control, a)
    line = analyze(a, b, x, [0.25, 0.5], spectra=False)
    chain = analyze(a, b, x, [0.25, 0.5], spectra=False, merge_fn=merge)
    assert len(line.records) == len(chain.records)
    compared = 0
    for r, s in zip(line.records, chain.records):
        assert r["lam"] == s["lam"] and r["name"] == s["name"]
        for key in ("lewc_cosine", "llfc_cosine", "weak_additivity_cosine"):
            if isinstance(r.get(key), float):
                assert s[key] == pytest.approx(r[key], abs=1e-5), key
                compared += 1
    assert compared >= 4
    # a bent chain's point at t = ½ is its bend, whatever the endpoints passed
    bend = {k: v + 0.5 if v.is_floating_point() else v for k, v in control.items()}
    point = curve_merge_fn("chain", bend, a)(a.state_dict(), b.state_dict(), 0.5)
    assert all(torch.equal(point[k], bend[k]) for k in bend)


def test_curve_pair_evaluates_the_curve_like_its_line_and_stores_the_control(digits, tmp_path):
    a, b = _mlp(0), _mlp(1)
    settings = PairSettings(path=PathSettings(lambdas=5, quiet=True), max_examples=300)
    result = curve_pair(a, b, digits, "chain", settings, FAST, plane=3)
    line, curve = result.line.path, result.curve.path
    assert (line.path, curve.path, result.curve.kind) == ("line", "chain", "chain")
    assert curve.lambdas == line.lambdas and curve.num_examples == line.num_examples == 300
    assert curve.loss[0] == line.loss[0] and curve.loss[-1] == line.loss[-1]  # same endpoints
    assert result.curve.settings.kind == "chain" and result.curve.fit.epochs_done == 1
    assert result.curve.plane is not None and len(result.curve.plane.xs) == 3
    # the chain's value at t = ½ is the loss of its bend, evaluated as a model
    probe = _mlp(5)
    probe.load_state_dict(result.curve.curve.control)
    x, y = digits.x_test[:300], digits.y_test[:300]
    with torch.no_grad():
        mid = float(torch.nn.functional.cross_entropy(probe(x).double(), y))
    assert curve.loss[curve.lambdas.index(0.5)] == pytest.approx(mid, abs=1e-6)

    written = write_curve_pair(result, tmp_path / "out")
    names = {p.name for p in written}
    assert {"curve.csv", "summary.json", "path.png", "plane.png", "control"} <= names
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["path"] == "line" and summary["curve"]["path"] == "chain"
    stored = load_run(tmp_path / "out" / "control", verify=True)
    assert stored.config["kind"] == "curve" and stored.config["curve"]["kind"] == "chain"
    again = load_curve(stored, a.state_dict(), b.state_dict())
    assert isinstance(again, Curve) and again.kind.name == "chain"
    rows = (tmp_path / "out" / "curve.csv").read_text().splitlines()
    assert {r.split(",")[0] for r in rows[1:]} == {"interpolation", "chain"}


def test_the_analysis_runs_at_points_of_a_fitted_curve(digits):
    a, b = _mlp(0), _mlp(1)
    pair = run_pair(a, b, digits, PairSettings(path=PathSettings(lambdas=3, quiet=True),
                                               max_examples=200))  # fmt: skip
    result = fit_pair_curve(pair, digits, FAST, plane=None, analysis_lambdas=[0.5])
    assert result.plane is None and result.analysis is not None
    assert {r["lam"] for r in result.analysis.records} == {0.5}
    line = analyze(a, b, digits.x_test[:200], [0.5], spectra=False)
    # the trained Bézier's midpoint is not the line's: its LLFC cosines differ somewhere
    llfc = [(r.get("llfc_cosine"), s.get("llfc_cosine"))
            for r, s in zip(line.records, result.analysis.records)]  # fmt: skip
    assert any(isinstance(u, float) and abs(u - v) > 1e-6 for u, v in llfc)
