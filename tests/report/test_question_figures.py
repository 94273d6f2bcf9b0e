"""scripts/question_figures.py re-derives the README's reviewer-question numbers from the
committed results: each subcommand runs on them, writes its figure and prints numbers that
match the committed tables."""

import math
from pathlib import Path

import pytest

from lmc.experiments import read_csv
from lmc.experiments.cells import number

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"


@pytest.fixture
def script(load_script):
    return load_script("question_figures")


@pytest.mark.parametrize(
    "command, folder",
    [
        ("random", "question-random-permutations"),
        ("logit-norm", "lewc-fmnist-mlp-wide"),
        ("weak-additivity", "lewc-fmnist-mlp-wide"),
        ("depth", "question-depth"),
        ("activations", "question-activations"),
    ],
)
def test_each_question_figure_is_drawn_from_committed_results(
    script, command, folder, tmp_path, capsys
):
    out = tmp_path / "figure.png"
    assert script.main([command, str(RESULTS / folder), str(out)]) == 0
    assert out.stat().st_size > 10_000
    printed = capsys.readouterr().out
    assert printed.strip() and "nan" not in printed.lower()


def test_random_permutation_numbers_match_table1(script, tmp_path, capsys):
    script.random_permutations(RESULTS / "question-random-permutations", tmp_path / "f.png")
    printed = capsys.readouterr().out
    for row in read_csv(RESULTS / "question-random-permutations" / "table1.csv"):
        if number(row["weight_decay"]) != 3e-3:
            continue
        mean = number(row["calibrated_midpoint_loss_barrier_mean"])
        assert math.isfinite(mean)
        line = next(l for l in printed.splitlines() if l.startswith(f"{row['method']}:"))
        assert f"{number(row['width']):g}: {mean:.3f}" in line
