"""A width study of GPTs on a text file (issue 29): the study accepts text data and the gpt
model, trains next-token runs, merges them with and without weight matching, analyses the
blocks, and writes the usual results."""

from __future__ import annotations

import csv

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
        "merge": {"methods": ["none", "weight", "orthogonal"], "lambdas": 3},
        "analysis": {"enabled": True, "max_examples": 20},
    }
    study = resolve(raw)
    record = run_study(study, tmp_path / "o", executor=LocalExecutor(1),
                       runs_dir=tmp_path / "runs", quiet=True)  # fmt: skip
    assert record["status"] == "finished"
    rows = list(csv.DictReader((tmp_path / "o" / "table1.csv").open()))
    assert sorted(r["method"] for r in rows) == ["none", "orthogonal", "weight"]
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
    assert layers and {r["method"] for r in layers} == {"none", "orthogonal", "weight"}
