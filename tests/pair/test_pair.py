"""lmc.pair: one code path for a pair, whether it comes from the CLI or a sweep."""

from __future__ import annotations

import json
import math

import pytest
import torch

from lmc.cli.main import main
from lmc.config import LmcError
from lmc.data import load
from lmc.models import build
from lmc.pair import (
    AnalysisOptions,
    PairSettings,
    PathSettings,
    alignment_examples,
    run_pair,
    write_pair,
)
from lmc.store import output_dir

PATH_KEYS = (
    "lambdas", "loss", "accuracy", "calibrated_loss", "inverse_temperature", "ensemble_loss",
    "ensemble_accuracy", "logit_norm", "loss_barrier", "midpoint_loss_barrier",
    "calibrated_midpoint_loss_barrier", "accuracy_barrier",
)  # fmt: skip


@pytest.fixture
def study(tiny_study, study_toml) -> str:
    """The tiny study's file at width 16, two epochs, aligned by activation matching (seed 3,
    300 examples) and calibrated, at five λ."""
    merge = {"methods": ["activation"], "lambdas": 5, "calibrate": True, "align_seed": 3,
             "align_examples": 300}  # fmt: skip
    raw = tiny_study("pair-agreement", sweep={"widths": [16]}, train={"epochs": 2}, merge=merge)
    return study_toml(raw)


def _sweep(tmp_path, capsys, study: str):
    (tmp_path / "study.toml").write_text(study)
    argv = ["sweep", str(tmp_path / "study.toml"), "--out", str(tmp_path / "out")]
    argv += ["--runs-dir", str(tmp_path / "runs"), "--workers", "1", "--quiet", "--json"]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_interpolate_and_sweep_merge_job_agree(tmp_path, capsys, study):
    _sweep(tmp_path, capsys, study)
    (job_file,) = (tmp_path / "out" / "jobs").glob("merge-*.json")
    job = json.loads(job_file.read_text())
    swept = json.loads((tmp_path / "out" / "pairs" / job_file.stem / "summary.json").read_text())
    argv = ["interpolate", job["runs"]["a"], job["runs"]["b"], "--runs-dir", str(tmp_path / "runs")]
    argv += ["--align", "activation", "--align-examples", "300", "--seed", "3", "--lambdas", "5"]
    argv += ["--calibrate", "--out", str(tmp_path / "cli"), "--quiet", "--json"]
    assert main(argv) == 0
    cli = json.loads(capsys.readouterr().out)
    assert cli["align_info"]["moved_fraction"] == swept["align_info"]["moved_fraction"]
    assert any(v > 0 for v in cli["align_info"]["moved_fraction"].values())
    for key in PATH_KEYS:
        assert cli[key] == swept[key], key
    on_disk = json.loads((tmp_path / "cli" / "summary.json").read_text())
    assert on_disk["loss"] == cli["loss"]


def test_lmc_train_reuses_the_run_a_sweep_trained(tmp_path, capsys, study):
    _sweep(tmp_path, capsys, study)
    argv = ["train", "--dataset", "digits", "--model", "mlp", "--width", "16", "--depth", "1"]
    argv += ["--epochs", "2", "--seed", "0", "--runs-dir", str(tmp_path / "runs"), "--json"]
    assert main(argv + ["--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["reused"] is True


@pytest.fixture(scope="module")
def pair():
    data = load("digits")
    return (
        build("mlp", seed=0, input_size=64, width=16),
        build("mlp", seed=1, input_size=64, width=16),
        data,
    )


def test_run_pair_endpoints_and_analysis(pair):
    model_a, model_b, data = pair
    settings = PairSettings(
        path=PathSettings(lambdas=3, calibrate=False), analysis=AnalysisOptions(lambdas=[0.5])
    )
    result = run_pair(model_a, model_b, data, settings)
    x, y = data.split("test")
    with torch.no_grad():
        loss_a = torch.nn.functional.cross_entropy(model_a.eval()(x), y).item()
        loss_b = torch.nn.functional.cross_entropy(model_b.eval()(x), y).item()
    assert result.path.lambdas == [0.0, 0.5, 1.0]
    assert math.isclose(result.path.loss[0], loss_a, rel_tol=1e-5)
    assert math.isclose(result.path.loss[-1], loss_b, rel_tol=1e-5)
    assert {r["lam"] for r in result.analysis.records} == {0.5}
    assert result.alignment is None


def test_pair_of_different_architectures_is_refused(pair):
    model_a, _, data = pair
    other = build("mlp", seed=1, input_size=64, width=16, activation="tanh")
    with pytest.raises(LmcError, match="activation"):
        run_pair(model_a, other, data)


def test_alignment_examples_are_a_seeded_subset(pair):
    data = pair[2]
    x1, y1 = alignment_examples(data, 100, seed=5)
    x2, _ = alignment_examples(data, 100, seed=5)
    x3, _ = alignment_examples(data, 100, seed=6)
    assert len(x1) == len(y1) == 100 and torch.equal(x1, x2) and not torch.equal(x1, x3)
    assert alignment_examples(data, None, 0)[0] is data.x_train


@pytest.mark.parametrize(
    "bad, fragment",
    [
        ({"align": "magic"}, "alignment method"),
        ({"split": "valid"}, "split"),
        ({"align_examples": 0}, "align_examples"),
        ({"max_examples": 1}, "max_examples"),
        ({"baseline": "random-direction", "path": None}, "baseline"),
    ],
)
def test_bad_settings_are_one_line_errors(bad, fragment):
    with pytest.raises(LmcError, match=fragment):
        PairSettings(**bad)


def test_write_pair_replaces_the_folder_whole(pair, tmp_path):
    model_a, model_b, data = pair
    result = run_pair(model_a, model_b, data, PairSettings(path=PathSettings(lambdas=3)))
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text("{}")  # an earlier pair output ...
    (out / "stale.txt").write_text("from an earlier run")  # ... with a file this one lacks
    written = write_pair(result, out)
    files = ["curve.csv", "path.png", "path.svg", "summary.json"]
    assert sorted(p.name for p in written) == files
    assert sorted(p.name for p in out.iterdir()) == files
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary folder left


def test_write_pair_never_replaces_a_folder_of_other_files(pair, tmp_path):
    model_a, model_b, data = pair
    result = run_pair(model_a, model_b, data, PairSettings(path=PathSettings(lambdas=3)))
    out = tmp_path / "papers"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    with pytest.raises(LmcError, match="holds other files"):
        write_pair(result, out)
    assert [p.name for p in out.iterdir()] == ["thesis.tex"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["papers"]


def test_output_dir_refuses_a_file_and_leaves_nothing_on_error(tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(LmcError, match="is a file"):
        with output_dir(target):
            pass
    with pytest.raises(RuntimeError):
        with output_dir(tmp_path / "new") as tmp:
            (tmp / "half.csv").write_text("a,b")
            raise RuntimeError("interrupted")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
