"""A study of the zoo's Llama-style model on a text file (issue 46): two tiny runs per pair,
merged with and without weight matching, the blocks analysed, the usual results written."""

from __future__ import annotations

import csv
import warnings

from lmc.experiments import LocalExecutor, resolve, run_study
from lmc.store import load_run


def test_a_study_of_llamas_on_text_runs_end_to_end(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("It was the best of times, it was the worst of times. " * 400, "utf-8")
    raw = {
        "name": "tiny-llama",
        "data": {"dataset": "text", "options": {"path": str(corpus), "context": 12}},
        "model": {"name": "llama", "depth": 1, "heads": 2, "kv_heads": 1},
        "sweep": {"widths": [8], "pairs": 1},
        "train": {"epochs": 1, "optimizer": "adam", "lr": 1e-3},
        "merge": {"methods": ["none", "weight"], "lambdas": 3},
        "analysis": {"enabled": True, "max_examples": 20},
    }
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="lmc.perm: ")  # RoPE fixes q/k head dims
        record = run_study(resolve(raw), tmp_path / "o", executor=LocalExecutor(1),
                           runs_dir=tmp_path / "runs", quiet=True)  # fmt: skip
    assert record["status"] == "finished"
    rows = list(csv.DictReader((tmp_path / "o" / "table1.csv").open()))
    assert sorted(r["method"] for r in rows) == ["none", "weight"]
    for row in rows:
        assert float(row["endpoint_train_loss_mean"]) > 0
        assert row["midpoint_loss_barrier_mean"] not in ("", "nan")
    runs = [load_run(p) for p in (tmp_path / "runs").iterdir() if p.name.startswith("llama")]
    assert len(runs) == 2
    for run in runs:
        assert run.config["model_options"]["kv_heads"] == 1
        assert run.config["model_options"]["context"] == 12
    layers = list(csv.DictReader((tmp_path / "o" / "layers.csv").open()))
    assert {r["name"] for r in layers} >= {"attn1", "mlp1", "block1", "logits"}
    assert {r["method"] for r in layers} == {"none", "weight"}
