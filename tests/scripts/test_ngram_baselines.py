"""The n-gram baselines a text study's page quotes (scripts/ngram_baselines.py)."""

from __future__ import annotations

import csv
import importlib.util
import math
from pathlib import Path

import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ngram_baselines.py"
spec = importlib.util.spec_from_file_location("ngram_baselines", SCRIPT)
ngram = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ngram)


def test_the_unigram_loss_is_the_cross_entropy_of_the_training_frequencies():
    y = torch.tensor([[0, 0, 0, 1]])  # frequencies 3/4, 1/4 (k = 0: no smoothing)
    loss, acc = ngram.ngram_scores(y, y, y, y, vocab=2, order=1, k=0.0)
    assert math.isclose(loss, -(0.75 * math.log(0.75) + 0.25 * math.log(0.25)), rel_tol=1e-12)
    assert acc == 0.75


def test_a_deterministic_sequence_is_learned_exactly_by_the_bigram():
    seq = torch.arange(40) % 5  # 0 1 2 3 4 0 1 ...: the next token is always (t + 1) mod 5
    x, y = seq[:-1].view(1, -1), seq[1:].view(1, -1)
    loss, acc = ngram.ngram_scores(x, y, x, y, vocab=5, order=2, k=0.0)
    assert loss == 0.0 and acc == 1.0
    loss1, _ = ngram.ngram_scores(x, y, x, y, vocab=5, order=1, k=0.0)
    assert math.isclose(loss1, math.log(5), rel_tol=1e-3)  # near-uniform frequencies


def test_the_script_writes_one_row_per_order(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("abcabcabd " * 200, "utf-8")
    study = tmp_path / "s.toml"
    study.write_text(f'[data]\ndataset = "text"\noptions = {{ path = "{corpus}", context = 8 }}\n')
    assert ngram.main([str(study), str(tmp_path / "n.csv")]) == 0
    rows = list(csv.DictReader((tmp_path / "n.csv").open()))
    assert [r["order"] for r in rows] == ["1", "2"]
    assert float(rows[1]["loss"]) < float(rows[0]["loss"])  # the bigram knows 'a' -> 'b'
