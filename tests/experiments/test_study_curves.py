"""A study's ``[merge] paths``: each merge job also fits and evaluates the listed curves, whose
rows sit beside the line's in results.csv (column ``path``), Table 1 and the report; the keys
leave studies without curves with the job ids they had."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from lmc.config import LmcError
from lmc.experiments import LocalExecutor, expand, read_csv, resolve, run_study
from lmc.experiments.jobs import CURVE_KEYS, merge_identity
from lmc.report import write_report


@pytest.fixture
def raw(tiny_study):
    """``raw(**merge)``: the tiny study at depth 2, widths 8 and 16, merged plain and by weight
    matching, with the keys ``merge`` in its [merge] table."""

    def raw(**merge) -> dict:
        merge = {"methods": ["none", "weight"], **merge}
        return tiny_study("tiny-curves", model={"depth": 2}, sweep={"widths": [8, 16]},
                          merge=merge)  # fmt: skip

    return raw


def _ids(raw: dict, digits) -> list[str]:
    return [job["id"] for job in expand(resolve(raw), digits)[1]]


def test_the_curve_keys_at_their_defaults_leave_merge_ids_as_they_were(digits, raw):
    before = _ids(raw(), digits)
    assert _ids(raw(**copy.deepcopy(CURVE_KEYS)), digits) == before
    assert all(k not in merge_identity(resolve(raw())["merge"], "none") for k in CURVE_KEYS)
    with_curve = _ids(raw(paths=["line", "bezier"]), digits)
    assert not set(with_curve) & set(before)
    assert _ids(raw(paths=["line", "bezier"], curve_epochs=3), digits) != with_curve


@pytest.mark.parametrize(
    "keys, message",
    [
        ({"paths": ["bezier"]}, 'must hold "line"'),
        ({"paths": ["line", "spline"]}, "path kinds from line, bezier, chain"),
        ({"paths": ["line", "chain", "chain"]}, "each kind once"),
        ({"curve_plane": 1}, "'merge.curve_plane'"),
        ({"curve_lr": 0.0}, "curve setting"),
        ({"curve_epochs": 0}, "curve setting"),
    ],
)
def test_bad_curve_keys_are_refused(keys, message, raw):
    with pytest.raises(LmcError, match=message):
        resolve(raw(**keys))


def test_a_study_with_paths_fits_curves_beside_the_line(digits, tmp_path, raw):
    study = resolve(raw(paths=["line", "bezier"], curve_epochs=1, curve_batch_size=256,
                        curve_plane=3))  # fmt: skip
    runs, out = tmp_path / "runs", tmp_path / "out"
    record = run_study(study, out, executor=LocalExecutor(1), runs_dir=runs, quiet=True)
    assert record["status"] == "finished" and "planes" in record["files"]
    rows = read_csv(out / "results.csv")
    kinds = {(r["width"], r["method"], r["path"]) for r in rows}
    assert kinds == {(w, m, p) for w in (8, 16) for m in ("none", "weight")
                     for p in ("line", "bezier")}  # fmt: skip
    for width in (8, 16):
        for method in ("none", "weight"):
            line = [
                r for r in rows if (r["width"], r["method"], r["path"]) == (width, method, "line")
            ]
            curve = [
                r for r in rows if (r["width"], r["method"], r["path"]) == (width, method, "bezier")
            ]
            assert [r["lam"] for r in curve] == [r["lam"] for r in line] == [0.0, 0.5, 1.0]
            # one pair of endpoints (B aligned as the method asks) for the line and the curve
            assert curve[0]["loss"] == line[0]["loss"] and curve[-1]["loss"] == line[-1]["loss"]
            mid = curve[1]
            assert mid["midpoint_loss_barrier"] == pytest.approx(
                mid["loss"] - 0.5 * (curve[0]["loss"] + curve[-1]["loss"])
            )
            assert mid["bend_distance"] > 0
    table = read_csv(out / "table1.csv")
    assert {(r["method"], r.get("path") or "line") for r in table} == {
        (m, p) for m in ("none", "weight") for p in ("line", "bezier")
    }
    planes = json.loads((out / "planes.json").read_text())
    assert len(planes) == 4 and {p["path"] for p in planes} == {"bezier"}
    assert len(planes[0]["plane"]["xs"]) == 3
    # each control point is a run of the study's store; a re-run reuses the finished jobs
    controls = [p for p in runs.iterdir() if "-curve-" in p.name]
    assert len(controls) == 4
    again = run_study(study, out, executor=LocalExecutor(1), runs_dir=runs, quiet=True)
    assert again["jobs"]["run"] == 0
    # the report: the line's sections read the line's rows, and a section for the curves
    written = write_report(out)
    text = Path(written["report_md"]).read_text()
    assert "## Curves beside the line" in text and "bezier − line" in text
    figures = {Path(f).name for f in written["figures"]}
    assert any(f.startswith("curves_vs_width") for f in figures)
    assert any(f.startswith("curve_planes") for f in figures)


def test_a_study_without_curves_has_no_curve_section(digits, tmp_path, raw):
    base = raw()
    study = resolve(base | {"sweep": {**base["sweep"], "widths": [8]}})
    out = tmp_path / "out"
    run_study(study, out, executor=LocalExecutor(1), runs_dir=tmp_path / "runs", quiet=True)
    rows = read_csv(out / "results.csv")
    assert {r["path"] for r in rows} == {"line"}
    assert "path" not in read_csv(out / "table1.csv")[0]
    assert not (out / "planes.json").exists()
    assert "Curves beside the line" not in Path(write_report(out)["report_md"]).read_text()
