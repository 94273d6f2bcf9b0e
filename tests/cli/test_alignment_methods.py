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
from lmc.perm.methods import (
    AlignmentMethod,
    MethodOutput,
    MethodSetting,
    register_method,
    unregister_method,
)
from lmc.store import load_run, load_tensors

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


@pytest.fixture()
def toy():
    register_method(TOY)
    SEEN.clear()
    yield TOY
    unregister_method("toyroll")


def test_lmc_align_runs_a_registered_method_with_its_setting(toy, digits_runs, capsys):
    root, a, b = digits_runs
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


def test_lmc_align_checks_a_registered_setting_and_refuses_another_methods_flag(
    toy, digits_runs, capsys
):
    root, a, b = digits_runs
    base = ["align", str(a), str(b), "--runs-dir", str(root), "--quiet"]
    assert main([*base, "--method", "toyroll", "--toyroll-shift", "-1"]) != 0
    assert "--toyroll-shift must be at least 0" in capsys.readouterr().err
    assert main([*base, "--method", "weight", "--toyroll-shift", "2"]) != 0
    assert "--toyroll-shift is a setting of method 'toyroll'" in capsys.readouterr().err
    assert SEEN == []


def test_lmc_interpolate_aligns_with_a_registered_method(toy, digits_runs, tmp_path):
    root, a, b = digits_runs
    out = tmp_path / "interp"
    argv = ["interpolate", str(a), str(b), "--align", "toyroll", "--toyroll-shift", "2"]
    assert main([*argv, "--lambdas", "3", "--out", str(out), "--quiet"]) == 0
    assert SEEN == [2]
    summary = json.loads((out / "summary.json").read_text())
    assert "toyroll" in json.dumps(summary)


def test_a_study_merges_with_a_registered_method_and_its_key(toy, tmp_path, tiny_study):
    raw = tiny_study(
        "tiny-toy",
        model={"depth": 2},
        sweep={"weight_decays": [3e-3]},
        merge={"methods": ["none", "toyroll"], "toyroll_shift": 5},
    )
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
