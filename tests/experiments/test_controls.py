"""The random-direction control in a width study (issue 31 item 2): ``[merge] methods`` may
list ``random-direction``, whose rows are the path A -> A + ||B - A|| u of the same pair."""

from __future__ import annotations

import csv

import pytest

from lmc.config import LmcError
from lmc.experiments import LocalExecutor, resolve, run_study


@pytest.fixture
def study(tiny_study) -> dict:
    """The tiny study at width 16 with the random-direction and one-pass controls beside the
    plain merge (calibrated), analysed on 64 examples."""
    return tiny_study(
        "controls",
        sweep={"widths": [16]},
        merge={"methods": ["none", "random-direction", "onepass"], "calibrate": None},
        analysis={"enabled": None, "max_examples": 64},
    )


def test_the_random_direction_control_runs_beside_the_methods(tmp_path, study):
    record = run_study(resolve(study), tmp_path / "o", executor=LocalExecutor(1),
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


def test_a_control_job_evaluates_only_its_own_path(monkeypatch, study):
    """The control's rows are the random direction's path: A -> B is not evaluated for it."""
    from lmc.data import load
    from lmc.experiments.jobs import merge_identity, pair_settings
    from lmc.models import build
    from lmc.pair import run_pair

    study = resolve(study)
    job = {"merge": merge_identity(study["merge"], "random-direction"), "split": "test",
           "analysis": study["analysis"], "method": "random-direction"}  # fmt: skip
    settings = pair_settings(job)
    assert settings.baseline_only and settings.analysis is None
    data = load("digits")
    a, b = (build("mlp", input_size=64, width=8, depth=1, seed=s) for s in (0, 1))
    calls = []
    import lmc.pair.pipeline as pipeline

    real = pipeline.evaluate_path
    monkeypatch.setattr(
        pipeline, "evaluate_path", lambda *a, **k: calls.append(a[1]) or real(*a, **k)
    )
    pair = run_pair(a, b, data, settings)
    assert pair.path is None and pair.baseline is not None
    assert calls == [None]  # one path, from A along the random direction (no model B)
    with pytest.raises(LmcError, match="baseline_only"):
        type(settings)(baseline_only=True)


def test_an_unknown_entry_names_the_control_among_the_choices(study):
    with pytest.raises(LmcError, match="random-direction"):
        resolve({**study, "merge": {"methods": ["nope"]}})
