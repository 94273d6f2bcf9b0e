"""The counterexample as a study kind: strict settings, one command, reuse, its own report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lmc.config import LmcError
from lmc.experiments import load_study, read_csv, resolve, run_study
from lmc.experiments.counterexample import counterexample_paths
from lmc.experiments.counterexample_study import SETTINGS
from lmc.experiments.kinds import ExperimentKind, get_kind, kind_names, register_kind
from lmc.experiments.study import resolve_file
from lmc.report import write_report

DOCS = Path(__file__).resolve().parents[2] / "docs" / "studies.md"


def _study(**settings):
    return {"name": "ce", "experiment": "counterexample", "counterexample": settings}


def test_defaults_are_filled_and_every_key_is_checked():
    study = resolve(_study())
    assert study == {
        "name": "ce",
        "description": "",
        "experiment": "counterexample",
        "counterexample": {"n": 4096, "seed": 0, "lambdas": 21, "scale": 8.0},
    }
    with pytest.raises(LmcError, match=r"unknown key 'counterexample.width'.*known: n, seed"):
        resolve(_study(width=3))
    with pytest.raises(LmcError, match=r"unknown key 'data' .*top-level keys are"):
        resolve({**_study(), "data": {"dataset": "digits"}})
    with pytest.raises(LmcError, match=r"'counterexample.n' must be int"):
        resolve(_study(n="many"))
    with pytest.raises(LmcError, match=r"'counterexample.n'"):
        resolve(_study(n=1))
    with pytest.raises(LmcError, match=r"'counterexample.scale'"):
        resolve(_study(scale=-1.0))
    with pytest.raises(LmcError, match=r"'counterexample.lambdas'"):
        resolve(_study(lambdas=[0.5, 2.0]))
    with pytest.raises(LmcError, match=r"'name'.*plain name"):
        resolve({**_study(), "name": "../x"})
    with pytest.raises(LmcError, match=r"variants.*width and merge-many studies"):
        resolve_file({**_study(), "variants": [{"name": "a"}]})


def test_an_unknown_experiment_lists_the_kinds():
    with pytest.raises(
        LmcError, match=r"unknown experiment 'frobnicate'.*width, counterexample, merge-many"
    ):
        resolve({"name": "x", "experiment": "frobnicate"})
    with pytest.raises(LmcError, match=r"'experiment' must be str"):
        resolve({"name": "x", "experiment": 3})
    assert kind_names()[0] == "width" and "counterexample" in kind_names()
    with pytest.raises(LmcError, match="width study's own kind"):
        register_kind(ExperimentKind("width", "", resolve, run_study))


def test_a_width_study_records_its_kind_and_refuses_anothers_table():
    raw = {
        "name": "w",
        "data": {"dataset": "synthetic"},
        "model": {"name": "mlp"},
        "sweep": {"widths": [4]},
    }
    assert resolve(raw)["experiment"] == "width"
    with pytest.raises(LmcError, match="unknown key 'counterexample'"):
        resolve({**raw, "counterexample": {}})


def test_the_study_runs_reuses_its_job_and_writes_the_barriers(tmp_path, capsys):
    study = resolve(_study(n=512, lambdas=11))
    first = run_study(study, tmp_path / "out", toml_text="# t\n")
    assert first["experiment"] == "counterexample"
    assert first["jobs"] == {"total": 1, "reused": 0, "run": 1}
    rows = read_csv(tmp_path / "out" / "barriers.csv")
    direct = counterexample_paths(n=512, seed=0, lambdas=11)
    assert [r["permutation"] for r in rows] == [p.label for p in direct]
    for row, path in zip(rows, direct):
        assert row["max_minus_mean_loss"] == pytest.approx(path.max_minus_mean_loss, rel=1e-12)
        assert row["accuracy_barrier"] == pytest.approx(path.accuracy_barrier, rel=1e-12)
        assert row["max_minus_mean_loss"] > 0 and row["accuracy_a"] == row["accuracy_b"] == 1.0
    assert sum(str(r["identity"]) == "True" for r in rows) == 1
    paths = read_csv(tmp_path / "out" / "paths.csv")
    assert len(paths) == 4 * 11 and {r["lambda"] for r in paths} >= {0.0, 0.5, 1.0}
    recorded = json.loads((tmp_path / "out" / "study.json").read_text())
    assert recorded["config"] == study and recorded["status"] == "finished"
    assert (tmp_path / "out" / "study.toml").read_text() == "# t\n"

    again = run_study(study, tmp_path / "out")
    assert again["jobs"] == {"total": 1, "reused": 1, "run": 0}
    other = run_study(resolve(_study(n=512, lambdas=11, seed=1)), tmp_path / "out", quiet=True)
    assert other["jobs"]["run"] == 1 and len(list((tmp_path / "out" / "jobs").iterdir())) == 2
    assert "smallest barrier" in capsys.readouterr().err


def test_the_report_states_the_verdict_from_the_files(tmp_path):
    out = tmp_path / "out"
    run_study(resolve(_study(n=512, lambdas=5)), out, quiet=True)
    written = write_report(out)
    text = Path(written["report_md"]).read_text()
    worst = min(r["max_minus_mean_loss"] for r in read_csv(out / "barriers.csv"))
    assert "**Confirmed:** all 4 permutations" in text and f"{worst:.3f} nats" in text
    assert [Path(p).name for p in written["figures"]] == ["counterexample_paths.png"]
    assert Path(written["figures"][0]).with_suffix(".svg").is_file()
    assert "<img" in Path(written["report_html"]).read_text()


def test_the_packaged_recipe_is_a_counterexample_study():
    study, text = load_study("rebasin-counterexample")
    assert study["experiment"] == "counterexample" and "App. A.6" in text
    assert get_kind("counterexample").name == "counterexample"


def test_docs_document_every_setting():
    text = DOCS.read_text()
    section = text.split('experiment = "counterexample"', 1)[1]
    for key, (_, default) in SETTINGS.items():
        assert re.search(rf"^\| `{key}` \|.*`{default}`", section, flags=re.M), key


def test_a_folder_of_a_kind_without_a_report_is_a_clear_error(tmp_path):
    (tmp_path / "study.json").write_text(json.dumps({"experiment": "frobnicate", "name": "x"}))
    with pytest.raises(LmcError, match=r"kind .frobnicate., which has no report"):
        write_report(tmp_path)
