"""scripts/question_figures.py re-derives the README's reviewer-question numbers from the
committed results: each subcommand runs on them, writes its figure and prints numbers that
match the committed tables."""

import importlib.util
import math
from pathlib import Path

import pytest

from lmc.experiments import read_csv
from lmc.experiments.cells import number

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"


def _script():
    spec = importlib.util.spec_from_file_location(
        "question_figures", ROOT / "scripts" / "question_figures.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
def test_each_question_figure_is_drawn_from_committed_results(command, folder, tmp_path, capsys):
    out = tmp_path / "figure.png"
    assert _script().main([command, str(RESULTS / folder), str(out)]) == 0
    assert out.stat().st_size > 10_000
    printed = capsys.readouterr().out
    assert printed.strip() and "nan" not in printed.lower()


def test_random_permutation_numbers_match_table1(tmp_path, capsys):
    _script().random_permutations(RESULTS / "question-random-permutations", tmp_path / "f.png")
    printed = capsys.readouterr().out
    for row in read_csv(RESULTS / "question-random-permutations" / "table1.csv"):
        if number(row["weight_decay"]) != 3e-3:
            continue
        mean = number(row["calibrated_midpoint_loss_barrier_mean"])
        assert math.isfinite(mean)
        line = next(l for l in printed.splitlines() if l.startswith(f"{row['method']}:"))
        assert f"{number(row['width']):g}: {mean:.3f}" in line
