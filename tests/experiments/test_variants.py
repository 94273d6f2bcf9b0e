"""Study variants: one file, several studies differing in a few settings."""

import pytest

from lmc.config import LmcError
from lmc.experiments.variants import split_variants, variant_rows

BASE = {
    "name": "q",
    "data": {"dataset": "digits"},
    "model": {"name": "mlp", "depth": 3, "activation": "relu"},
    "sweep": {"widths": [8]},
}


def test_no_variants_is_an_empty_list():
    assert split_variants(BASE) == []


def test_each_variant_updates_its_tables_key_by_key():
    raw = {**BASE, "variants": [{"name": "d1", "model": {"depth": 1}},
                                {"name": "tanh", "model": {"activation": "tanh"},
                                 "train": {"epochs": 2}}]}  # fmt: skip
    (n1, s1, c1), (n2, s2, c2) = split_variants(raw)
    assert (n1, s1["name"], c1) == ("d1", "q-d1", {"model.depth": 1})
    assert s1["model"] == {"name": "mlp", "depth": 1, "activation": "relu"}
    assert s2["model"] == {"name": "mlp", "depth": 3, "activation": "tanh"}
    assert s2["train"] == {"epochs": 2} and "train" not in s1
    assert c2 == {"model.activation": "tanh", "train.epochs": 2}
    assert "variants" not in s1 and raw["model"]["depth"] == 3  # the base is not changed


@pytest.mark.parametrize(
    "variants, fragment",
    [
        ([], "non-empty list"),
        ("x", "non-empty list"),
        ([42], "must be a table"),
        ([{"model": {"depth": 1}}], "plain name"),
        ([{"name": "../x", "model": {"depth": 1}}], "plain name"),
        (
            [{"name": "a", "model": {"depth": 1}}, {"name": "a", "model": {"depth": 2}}],
            "two variants",
        ),
        ([{"name": "a", "epochs": 2}], "changes only these tables"),
        ([{"name": "a"}], "changes nothing"),
        ([{"name": "a", "model": 3}], "must be a table"),
    ],
)
def test_bad_variants_are_refused_with_one_line(variants, fragment):
    with pytest.raises(LmcError, match=fragment) as info:
        split_variants({**BASE, "variants": variants}, "q.toml")
    assert "\n" not in str(info.value)


def test_variant_rows_lead_with_the_variant_and_its_changes():
    variants = [{"name": "d1", "changed": {"model.depth": 1}},
                {"name": "tanh", "changed": {"model.activation": "tanh"}}]  # fmt: skip
    rows = variant_rows(variants, [[{"width": 8}], [{"width": 8}, {"width": 16}]])
    assert rows[0] == {"variant": "d1", "model.activation": "", "model.depth": 1, "width": 8}
    assert [r["variant"] for r in rows] == ["d1", "tanh", "tanh"]
    assert list(rows[2]) == ["variant", "model.activation", "model.depth", "width"]


def test_a_sweep_runs_each_variant_and_writes_the_table_across_them(
    tmp_path, capsys, tiny_study, study_toml
):
    import json
    import warnings

    from lmc.cli.main import main
    from lmc.experiments import read_csv

    study = tmp_path / "tiny.toml"
    variants = [
        {"name": "depth1", "model": {"depth": 1}},
        {"name": "depth2", "model": {"depth": 2}},
    ]
    raw = tiny_study(description="two depths", merge={"calibrate": None}, variants=variants)
    study.write_text(study_toml(raw))
    out = tmp_path / "out"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a tiny run's calibration warnings
        # one worker: in-process (a pool would spawn interpreters; test_workers_identity.py
        # checks that the worker count changes no result)
        code = main(["sweep", str(study), "--out", str(out), "--runs-dir", str(tmp_path / "runs"),
                     "--workers", "1", "--quiet", "--json"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    record = json.loads(capsys.readouterr().out)
    assert [v["name"] for v in record["variants"]] == ["depth1", "depth2"]
    for name, depth in (("depth1", 1), ("depth2", 2)):
        sub = json.loads((out / name / "study.json").read_text())
        assert sub["config"]["model"]["depth"] == depth and sub["name"] == f"tiny-{name}"
        assert (out / name / "report.html").is_file()
    rows = read_csv(out / "variants.csv")
    assert [(r["variant"], r["model.depth"]) for r in rows] == [("depth1", 1), ("depth2", 2)]
    per_variant = read_csv(out / "depth2" / "table1.csv")
    assert rows[1]["merged_accuracy_mean"] == per_variant[0]["merged_accuracy_mean"]
    index = (out / "report.md").read_text()
    assert "depth2/report.html" in index and "Table 1 across variants" in index
    assert record["report_html"] == str(out / "report.html")
    # four training runs: two depths x two models, none shared
    assert len([p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]) == 4


def test_the_index_shows_each_mean_with_its_95_percent_interval():
    from lmc.report.variants import _estimate

    row = {"merged_accuracy_mean": 0.8, "merged_accuracy_ci95": 0.012, "pairs": 3.0}
    assert _estimate(row, "merged_accuracy_mean", "{:.1%}") == "80.0% ± 1.2%"
    assert _estimate(row, "pairs", "{:g}") == "3"
    assert _estimate({"merged_accuracy_mean": 0.8}, "merged_accuracy_mean", "{:.1%}") == "80.0%"
