"""A new alignment method is one module and one registration (issue 28 item 2).

A toy method registered here (``toyroll``: roll every group's units by ``shift`` places) runs
through ``lmc align``, ``lmc interpolate --align`` and a study's ``[merge] methods``, with its
setting given in each (``--toyroll-shift``, ``[merge] toyroll_shift``) and reaching the method.
"""

from __future__ import annotations

import json

import pytest
import torch

from lmc.cli.main import main
from lmc.config import LmcError
from lmc.experiments import LocalExecutor, resolve, run_study
from lmc.models import build
from lmc.perm.methods import (
    AlignmentMethod,
    MethodOutput,
    MethodSetting,
    register_method,
    unregister_method,
)
from lmc.store import RunStore, load_run, load_tensors
from lmc.train import TrainSettings, fit

SEEN: list[int] = []


def _toyroll(job, *, shift: int) -> MethodOutput:
    SEEN.append(shift)
    perm = {g: torch.roll(torch.arange(n), shift) for g, n in job.spec.group_sizes.items()}
    return MethodOutput(perm, {"toy_shift": shift})


TOY = AlignmentMethod(
    "toyroll",
    _toyroll,
    "roll every group's units by a fixed number of places (a test method)",
    settings=(MethodSetting("shift", 1, "places to roll by", minimum=0),),
)
OPTIONS = dict(input_size=64, width=12, depth=2)


@pytest.fixture()
def toy():
    register_method(TOY)
    SEEN.clear()
    yield TOY
    unregister_method("toyroll")


def _save_run(store: RunStore, digits, seed: int):
    model = build("mlp", seed=seed, **OPTIONS)
    fit(model, digits, TrainSettings(epochs=1, init_seed=seed, data_seed=seed))
    config = {
        "kind": "train",
        "dataset": "digits",
        "dataset_options": {},
        "model": "mlp",
        "model_options": dict(OPTIONS),
        "train": {"epochs": 1, "init_seed": seed, "data_seed": seed},
    }
    return store.save(config, model.state_dict(), {"final_test_loss": 0.0})


@pytest.fixture(scope="module")
def runs(tmp_path_factory, digits):
    root = tmp_path_factory.mktemp("runs")
    store = RunStore(root)
    return root, _save_run(store, digits, 1).path, _save_run(store, digits, 2).path


def test_lmc_align_runs_a_registered_method_with_its_setting(toy, runs, capsys):
    root, a, b = runs
    argv = ["align", str(a), str(b), "--method", "toyroll", "--toyroll-shift", "3"]
    assert main([*argv, "--runs-dir", str(root), "--quiet"]) == 0
    aligned = load_run(capsys.readouterr().out.strip().splitlines()[-1])
    assert SEEN == [3]
    assert aligned.config["align"]["method"] == "toyroll" and aligned.config["align"]["shift"] == 3
    perm = load_tensors(aligned.path / "perm.safetensors")
    assert torch.equal(perm["fc1"], torch.roll(torch.arange(12), 3))
    # the aligned B is B with the roll applied: fc1's rows moved by 3
    b_state = load_run(b).state_dict()
    assert torch.equal(aligned.state_dict()["fc1.weight"], b_state["fc1.weight"][perm["fc1"]])


def test_lmc_align_checks_a_registered_setting_and_refuses_another_methods_flag(toy, runs, capsys):
    root, a, b = runs
    base = ["align", str(a), str(b), "--runs-dir", str(root), "--quiet"]
    assert main([*base, "--method", "toyroll", "--toyroll-shift", "-1"]) != 0
    assert "--toyroll-shift must be at least 0" in capsys.readouterr().err
    assert main([*base, "--method", "weight", "--toyroll-shift", "2"]) != 0
    assert "--toyroll-shift is a setting of method 'toyroll'" in capsys.readouterr().err
    assert SEEN == []


def test_lmc_interpolate_aligns_with_a_registered_method(toy, runs, tmp_path):
    root, a, b = runs
    out = tmp_path / "interp"
    argv = ["interpolate", str(a), str(b), "--align", "toyroll", "--toyroll-shift", "2"]
    assert main([*argv, "--lambdas", "3", "--out", str(out), "--quiet"]) == 0
    assert SEEN == [2]
    summary = json.loads((out / "summary.json").read_text())
    assert "toyroll" in json.dumps(summary)


def test_a_study_merges_with_a_registered_method_and_its_key(toy, tmp_path):
    raw = {
        "name": "tiny-toy",
        "data": {"dataset": "digits"},
        "model": {"name": "mlp", "depth": 2},
        "sweep": {"widths": [8], "weight_decays": [3e-3], "pairs": 1},
        "train": {"epochs": 1},
        "merge": {
            "methods": ["none", "toyroll"],
            "lambdas": 3,
            "calibrate": False,
            "toyroll_shift": 5,
        },  # fmt: skip
        "analysis": {"enabled": False},
    }
    with pytest.raises(LmcError, match="'merge.toyroll_shift' must be at least 0"):
        resolve({**raw, "merge": {**raw["merge"], "toyroll_shift": -2}})
    study = resolve(raw)
    record = run_study(study, tmp_path / "o", executor=LocalExecutor(1),
                       runs_dir=tmp_path / "runs", quiet=True)  # fmt: skip
    assert record["status"] == "finished"
    assert SEEN == [5]
    jobs = [json.loads(p.read_text()) for p in (tmp_path / "o" / "jobs").glob("merge-*.json")]
    toy_jobs = [j for j in jobs if j.get("align") and j["align"]["method"] == "toyroll"]
    assert len(toy_jobs) == 1 and toy_jobs[0]["align"]["settings"] == {"shift": 5}
