"""A width study of GPTs on a text file (issue 29): the study accepts text data and the gpt
model, trains next-token runs, merges them with and without weight matching, analyses the
blocks, and writes the usual results."""

from __future__ import annotations

import csv

import pytest

from lmc.config import LmcError
from lmc.experiments import LocalExecutor, resolve, run_study
from lmc.store import load_run


def test_a_study_of_gpts_on_text_runs_end_to_end(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("It was the best of times, it was the worst of times. " * 400, "utf-8")
    raw = {
        "name": "tiny-text",
        "data": {"dataset": "text", "options": {"path": str(corpus), "context": 12}},
        "model": {"name": "gpt", "depth": 1, "heads": 2},
        "sweep": {"widths": [8], "pairs": 1},
        "train": {"epochs": 1, "optimizer": "adam", "lr": 1e-3},
        "merge": {
            "methods": ["none", "weight", "orthogonal", "orthogonal-activation"],
            "lambdas": 3,
        },  # fmt: skip
        "analysis": {"enabled": True, "max_examples": 20},
    }
    study = resolve(raw)
    record = run_study(study, tmp_path / "o", executor=LocalExecutor(1),
                       runs_dir=tmp_path / "runs", quiet=True)  # fmt: skip
    assert record["status"] == "finished"
    rows = list(csv.DictReader((tmp_path / "o" / "table1.csv").open()))
    methods = ["none", "orthogonal", "orthogonal-activation", "weight"]
    assert sorted(r["method"] for r in rows) == methods
    for row in rows:
        assert float(row["endpoint_train_loss_mean"]) > 0
        assert row["calibrated_midpoint_loss_barrier_mean"] not in ("", "nan")
    runs = [load_run(p) for p in (tmp_path / "runs").iterdir() if p.name.startswith("gpt-text")]
    assert len(runs) == 2
    for run in runs:
        assert run.config["dataset_options"]["context"] == 12
        assert run.config["model_options"]["context"] == 12
        assert (run.path / "tokenizer.json").is_file()
    layers = list(csv.DictReader((tmp_path / "o" / "layers.csv").open()))
    assert layers and {r["method"] for r in layers} == set(methods)


def _ratio_study(corpus, **sweep):
    return {
        "name": "tiny-widen",
        "data": {"dataset": "text", "options": {"path": str(corpus), "context": 12}},
        "model": {"name": "gpt", "depth": 1, "heads": 2},
        "sweep": {"widths": [8], "pairs": 1, **sweep},
        "train": {"epochs": 1, "optimizer": "adam", "lr": 1e-3},
        "merge": {"methods": ["none", "orthogonal"], "lambdas": 3},
        "analysis": {"enabled": True, "max_examples": 20},
    }


def test_a_narrow_gpt_merged_into_a_wide_one_keeps_both_endpoints(tmp_path):
    """width_ratio 2: B trains at twice A's width and the path's ends are the two trained
    models exactly (the narrow one embedded into the wide architecture keeps its function)."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("It was the best of times, it was the worst of times. " * 400, "utf-8")
    study = resolve(_ratio_study(corpus, width_ratio=2))
    record = run_study(study, tmp_path / "o", executor=LocalExecutor(1),
                       runs_dir=tmp_path / "runs", quiet=True)  # fmt: skip
    assert record["status"] == "finished"
    runs = {
        r.config["model_options"]["width"]: r for r in map(load_run, (tmp_path / "runs").iterdir())
    }
    assert sorted(runs) == [8, 16]
    rows = list(csv.DictReader((tmp_path / "o" / "results.csv").open()))
    assert {(r["width"], r["width_b"]) for r in rows} == {("8", "16")}
    for method in ("none", "orthogonal"):
        path = {float(r["lam"]): r for r in rows if r["method"] == method}
        for lam, width in ((0.0, 8), (1.0, 16)):
            expected = runs[width].metrics["final_test_accuracy"]
            assert abs(float(path[lam]["accuracy"]) - expected) < 1e-6, (method, lam)
    table = list(csv.DictReader((tmp_path / "o" / "table1.csv").open()))
    assert {(r["width"], r["width_b"]) for r in table} == {("8", "16")}
    layers = list(csv.DictReader((tmp_path / "o" / "layers.csv").open()))
    assert layers and {r["width_b"] for r in layers} == {"16"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sweep": {"width_ratio": 0.5}}, "width_ratio"),
        ({"model": {"name": "mlp"}, "data": {"dataset": "digits"}}, "gpt"),
        ({"sweep": {"width_ratio": 2, "spawn_epoch": 1}}, "spawn_epoch 0"),
        ({"sweep": {"width_ratio": 1.3}}, "B.s width"),
    ],
)
def test_width_ratio_is_checked_before_anything_runs(tmp_path, change, message):
    raw = _ratio_study(tmp_path / "corpus.txt", width_ratio=2)
    for table, values in change.items():
        raw[table] = {**raw[table], **values} if table != "data" else values
        if table == "model" and values.get("name") == "mlp":
            raw["model"] = {"name": "mlp"}
    with pytest.raises(LmcError, match=message):
        resolve(raw)


def test_width_ratio_is_accepted_for_vits():
    raw = {
        "name": "tiny-widen-vit",
        "data": {"dataset": "digits"},
        "model": {"name": "vit", "depth": 1, "heads": 2},
        "sweep": {"widths": [8], "pairs": 1, "width_ratio": 2},
        "merge": {"methods": ["none", "orthogonal"]},
    }
    assert resolve(raw)["sweep"]["width_ratio"] == 2
