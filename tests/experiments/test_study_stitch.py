"""Stitching inside a width study ([stitch] enabled; LLFC App. B.4)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from lmc.analysis import stitching_errors
from lmc.config import LmcError
from lmc.data import load
from lmc.experiments import LocalExecutor, expand, read_csv, resolve, run_study
from lmc.report import write_report
from lmc.store import RunStore


@pytest.fixture
def tiny(tiny_study) -> dict:
    """The tiny study at depth 2, width 16, two epochs, merged plain and by weight matching, with
    stitching enabled."""
    return tiny_study(
        "tiny-stitch",
        model={"depth": 2},
        sweep={"widths": [16]},
        train={"epochs": 2},
        merge={"methods": ["none", "weight"]},
        stitch={"enabled": True},
    )


def test_stitching_enters_the_merge_id_only_when_enabled(tiny):
    data = load("digits")
    off = copy.deepcopy(tiny)
    del off["stitch"]
    _, plain = expand(resolve(off), data)
    _, disabled = expand(resolve({**off, "stitch": {"enabled": False}}), data)
    _, enabled = expand(resolve(tiny), data)
    assert [j["id"] for j in plain] == [j["id"] for j in disabled]  # earlier ids still hold
    assert not {j["id"] for j in plain} & {j["id"] for j in enabled}
    with pytest.raises(LmcError, match=r"unknown key 'stitch.layers'"):
        resolve({**tiny, "stitch": {"layers": 3}})


def test_a_model_stitching_cannot_cut_is_refused_before_training(tiny):
    study = {**tiny, "model": {"name": "vit", "patch": 4, "depth": 1, "heads": 2},
             "sweep": {"widths": [16], "pairs": 1}}  # fmt: skip
    with pytest.raises(LmcError, match=r"'stitch.enabled'.*stitching knows"):
        resolve(study)


def test_the_study_writes_stitch_csv_with_the_endpoints_at_its_ends(tmp_path, tiny):
    runs = tmp_path / "runs"
    study = resolve(tiny)
    record = run_study(study, tmp_path / "out", executor=LocalExecutor(1), runs_dir=runs,
                       quiet=True)  # fmt: skip
    assert record["files"]["stitch"] == "stitch.csv"
    rows = read_csv(tmp_path / "out" / "stitch.csv")
    assert {r["method"] for r in rows} == {"none", "weight"}
    assert [r["layer"] for r in rows if r["method"] == "none"] == [0, 1, 2, 3]  # L = depth + 1
    store = RunStore(runs)
    train_jobs, _ = expand(study, load("digits"))
    model_a, model_b = (store.find(j["config"]).build_model("cpu") for j in train_jobs)
    data = load("digits")
    expected = stitching_errors(model_a, model_b, data)
    errors = {r["layer"]: r["error"] for r in rows if r["method"] == "none"}
    assert [errors[k] for k in range(4)] == pytest.approx(expected, abs=0)
    for row in rows:
        # layer 0 is B alone, layer L is A alone, whatever B's permutation
        with torch.no_grad():
            acc_a = (model_a(data.x_test).argmax(1) == data.y_test).double().mean().item()
        assert row["error_a"] == pytest.approx(1 - acc_a, abs=1e-12)
        assert row["error_b"] == pytest.approx(expected[0], abs=1e-12)
    written = write_report(tmp_path / "out")
    text = Path(written["report_md"]).read_text()
    assert "## Stitching" in text and "| 16 | 0.003 | weight matching |" in text
    assert any(Path(f).name == "stitching_wd0.003.png" for f in written["figures"])
    # turning stitching off again removes the earlier stitch.csv: no stale file is left
    off = resolve({**tiny, "stitch": {"enabled": False}})
    record = run_study(off, tmp_path / "out", executor=LocalExecutor(1), runs_dir=runs,
                       quiet=True)  # fmt: skip
    assert "stitch" not in record["files"] and not (tmp_path / "out" / "stitch.csv").exists()
    assert "## Stitching" not in Path(write_report(tmp_path / "out")["report_md"]).read_text()
