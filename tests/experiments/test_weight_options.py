"""Weight matching's start, restarts and solver in a study ([merge] weight_init,
weight_restarts, weight_solver): they reach the matching, and at the values every earlier
merge ran with (identity, 1, scipy; not the defaults onepass and auto) they stay out of the
merge job's identity, so the committed studies, which pin them, keep their ids."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from lmc.config import LmcError, config_hash
from lmc.data import load
from lmc.experiments import LocalExecutor, expand, load_study, resolve, run_study
from lmc.experiments.jobs import merge_identity
from lmc.perm.lap import resolve_solver

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@pytest.fixture
def tiny(tiny_study):
    """``tiny(**merge)``: the tiny study at depth 2, width 16, two epochs, merged by weight
    matching alone, with the keys ``merge`` in its [merge] table."""

    def tiny(**merge) -> dict:
        merge = {"methods": ["weight"], **merge}
        return tiny_study("tiny-wm", model={"depth": 2}, sweep={"widths": [16]},
                          train={"epochs": 2}, merge=merge)  # fmt: skip

    return tiny


LATER_KEYS = ("weight_init", "weight_restarts", "weight_solver")


def _old_rule_id(job: dict, methods: list[str]) -> str:
    """A merge job's id as it was computed before weight matching's start, restarts and solver
    were study keys: the hash of the job with none of them in its ``merge`` table (which then
    held the study's ``methods`` list too)."""
    old = {k: v for k, v in job.items() if k not in ("id", "legacy_ids")}
    merge = {k: v for k, v in job["merge"].items() if k not in LATER_KEYS}
    old["merge"] = {**merge, "methods": list(methods)}
    return f"merge-{config_hash(old)}"


def test_identity_start_and_scipy_keep_the_old_ids_and_other_values_enter_them(tiny):
    data = load("digits")
    ids, jobs = {}, {}
    for key, raw in {
        "plain": tiny(),
        "pinned": tiny(weight_init="identity", weight_restarts=1, weight_solver="scipy"),
        "onepass": tiny(weight_init="onepass"),
        "onepass-auto": tiny(weight_init="onepass", weight_solver="auto"),
        "identity-auto": tiny(weight_init="identity"),
        "restarts": tiny(weight_init="identity", weight_solver="scipy", weight_restarts=3),
        "sparse": tiny(weight_init="identity", weight_solver="sparse"),
    }.items():
        _, merges = expand(resolve(raw), data)
        ids[key], jobs[key] = merges[0]["id"], merges[0]
    # the start and solver every committed merge ran with leave the id as it always was
    # (under the id they had while the study's methods list was hashed in: their legacy_ids)
    assert jobs["pinned"]["legacy_ids"][0] == _old_rule_id(jobs["pinned"], ["weight"])
    assert not set(LATER_KEYS) & set(jobs["pinned"]["merge"])
    # the defaults (one-pass start, solver auto) are in the id: such merges are new jobs
    assert ids["plain"] == ids["onepass-auto"] == ids["onepass"]
    assert jobs["plain"]["merge"]["weight_init"] == "onepass"
    assert jobs["plain"]["merge"]["weight_solver"] == "auto"
    others = [ids[k] for k in ("plain", "identity-auto", "restarts", "sparse")]
    assert len({ids["pinned"], *others}) == 5
    for key in ("plain", "identity-auto", "restarts", "sparse"):
        assert jobs[key]["legacy_ids"][0] != _old_rule_id(jobs[key], ["weight"])
    with pytest.raises(LmcError, match="'merge.weight_init'"):
        resolve(tiny(weight_init="activation"))
    with pytest.raises(LmcError, match="'merge.weight_restarts'"):
        resolve(tiny(weight_restarts=0))
    with pytest.raises(LmcError, match="'merge.weight_solver'"):
        resolve(tiny(weight_solver="hungarian"))


def test_lapx_asked_for_where_it_cannot_run_is_refused_before_anything_runs(monkeypatch, tiny):
    from lmc.perm import lap

    monkeypatch.setattr(lap, "lapx_problem", lambda: "the lapx package is not installed")
    with pytest.raises(LmcError, match="'merge.weight_solver'.*not installed"):
        resolve(tiny(weight_solver="lapx"))
    resolve(tiny(weight_solver="lapx", methods=["none"]))  # no weight matching: not needed
    assert lap.resolve_solver("auto") == "scipy"  # the default falls back to SciPy's


def _width_studies(study: dict) -> list[dict]:
    return [v["study"] for v in study["variants"]] if "variants" in study else [study]


@pytest.mark.parametrize("where", ["recipes", "results"])
def test_every_committed_study_with_weight_matching_pins_its_start_and_solver(where):
    """Every packaged recipe and every committed study.toml that runs weight matching names
    the start and solver its results ran with, so their merge ids (and numbers) hold."""
    root = Path(__file__).resolve().parents[2]
    paths = (
        sorted((root / "src" / "lmc" / "recipes").glob("*.toml"))
        if where == "recipes"
        else sorted((root / "docs" / "results").glob("*/study.toml"))
    )
    checked = 0
    for path in paths:
        study, _ = load_study(path)
        raw = tomllib.loads(path.read_text())
        written = [raw.get("merge", {})]  # the [merge] each study of the file was written with
        written = [{**written[0], **v.get("merge", {})} for v in raw.get("variants", [])] or written
        for one, given in zip(_width_studies(study), written, strict=True):
            if "merge" not in one or "weight" not in one["merge"]["methods"]:
                continue
            checked += 1
            merge = one["merge"]
            assert {"weight_init", "weight_solver"} <= set(given), path  # named, not defaulted
            if (merge["weight_init"], merge["weight_solver"]) != ("identity", "scipy"):
                continue  # a study run since the one-pass default: its own pins hold its ids
            assert not set(LATER_KEYS) & set(merge_identity(merge, "weight")), path
    assert checked >= 10


def test_a_sweep_runs_weight_matching_with_the_asked_start_and_restarts(tmp_path, tiny):
    study = resolve(tiny(weight_init="onepass", weight_restarts=3))
    record = run_study(study, tmp_path / "o", executor=LocalExecutor(1),
                       runs_dir=tmp_path / "runs", quiet=True)  # fmt: skip
    (job,) = (tmp_path / "o" / "jobs").glob("merge-*.json")
    align = json.loads(job.read_text())["align"]
    assert align["settings"]["init"] == "onepass" and align["settings"]["restarts"] == 3
    assert align["settings"]["solver"] == "auto" and align["solver"] == resolve_solver("auto")
    assert len(align["restart_objectives"]) == 3
    assert align["objective_after"] == pytest.approx(max(align["restart_objectives"]))
    assert record["status"] == "finished"


def test_merges_of_other_methods_keep_their_ids_whatever_the_weight_matching_keys(tiny):
    """A ``none`` (or ``activation``) merge never reads weight_init / weight_solver /
    weight_restarts: at the new defaults its id is the one it had before they existed."""
    data = load("digits")
    ids = set()
    for raw in (
        tiny(methods=["none", "activation"]),
        tiny(methods=["none", "activation"], weight_init="identity", weight_solver="scipy"),
        tiny(methods=["none", "activation"], weight_restarts=4, weight_solver="sparse"),
    ):
        _, merges = expand(resolve(raw), data)
        for job in merges:
            assert not set(LATER_KEYS) & set(job["merge"])
            assert job["legacy_ids"][0] == _old_rule_id(job, ["none", "activation"])
        ids.add(tuple(job["id"] for job in merges))
    assert len(ids) == 1
    assert merge_identity({"weight_init": "onepass"}, "weight") == {"weight_init": "onepass"}
    assert merge_identity({"weight_init": "onepass"}, "none") == {}
