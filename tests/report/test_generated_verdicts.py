"""The verdicts, ratios, pair counts and run times on the results pages and in the generated
blocks (the README's and the site pages') are generated (scripts/results_pages.py through
lmc.stats), never typed: each placeholder on tiny files written here against lmc.stats' own
answer, and a verdict word or a run time edited by hand in a rendered page or block makes the
committed-text check fail."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from lmc import stats

ROOT = Path(__file__).resolve().parents[2]
# per pair (A, B) of one study: a barrier repeated on each λ row, as results.csv holds it
A = [0.30, 0.25, 0.40]
B = [0.37, 0.32, 0.46]  # B − A: +0.07, +0.07, +0.06, higher in every pair
HEADER = "width,weight_decay,pair,method,lam,calibrated_midpoint_loss_barrier,accuracy\n"


@pytest.fixture(scope="module")
def pages(load_script):
    return load_script("results_pages")


def _results(folder: Path, rows: dict, seed: int = 0) -> None:
    """``results.csv`` (rows: (width, method) -> per-pair values, each on λ 0, ½ and 1),
    its ``table1.csv`` summary and a study.toml with ``[sweep] seed``."""
    folder.mkdir(parents=True, exist_ok=True)
    lines, table = [HEADER], ["width,weight_decay,method,pairs,x_mean,x_std\n"]
    for (width, method), values in rows.items():
        for pair, value in enumerate(values):
            for lam in (0.0, 0.5, 1.0):
                accuracy = 0.8 + value / 10 if lam == 0.5 else 0.9
                lines.append(f"{width},0.003,{pair},{method},{lam},{value},{accuracy}\n")
        table.append(
            f"{width},0.003,{method},{len(values)},{np.mean(values)},{np.std(values, ddof=1)}\n"
        )
    (folder / "results.csv").write_text("".join(lines))
    (folder / "table1.csv").write_text(
        "".join(table).replace(
            "x_mean,x_std",
            "calibrated_midpoint_loss_barrier_mean,calibrated_midpoint_loss_barrier_std",
        )
    )
    (folder / "study.toml").write_text(f'name = "{folder.name}"\n[sweep]\nseed = {seed}\n')


def _render(pages, root: Path, body: str) -> str:
    return pages.render_placeholder(pages.Context(base=root, root=root, source="test"), body)


def _cell(folder: str, width: int, method: str, column: str = "calibrated_midpoint_loss_barrier"):
    return f"[{folder}/results.csv: width={width}, method={method} | {column}]"


def test_a_paired_verdict_on_shared_pairs(pages, tmp_path):
    _results(tmp_path / "s", {(64, "none"): A, (64, "weight"): B})
    text = _render(pages, tmp_path, f"? {_cell('s', 64, 'none')} vs {_cell('s', 64, 'weight')}")
    expected = stats.verdict(stats.compare(dict(enumerate(A)), dict(enumerate(B))))
    assert text == expected
    assert text.startswith("higher in every pair: +0.067 ± ")
    assert "p = " in text and "3 pairs" in text
    # the paired p-value is scipy's paired t-test's, far below Welch's on the same numbers
    p_paired = sps.ttest_rel(B, A).pvalue
    assert f"p = {p_paired:#.2g}" in text
    # the summary row is read from the results.csv beside it: the same verdict
    summary = "[s/table1.csv: width=64, method={} | calibrated_midpoint_loss_barrier]"
    assert _render(
        pages, tmp_path, f"? {summary.format('none')} vs {summary.format('weight')}"
    ) == (expected)


def test_cells_without_shared_seeds_are_compared_by_welch(pages, tmp_path):
    _results(tmp_path / "s", {(64, "none"): A})
    _results(tmp_path / "t", {(64, "none"): B}, seed=10)  # other seeds: pair p is other models
    text = _render(pages, tmp_path, f"? {_cell('s', 64, 'none')} vs {_cell('t', 64, 'none')}")
    welch = stats.compare(A, B)
    assert text == stats.verdict(welch)
    assert "(unpaired, Welch" in text
    assert welch.p_value == pytest.approx(sps.ttest_ind(B, A, equal_var=False).pvalue)
    # the same seeds, forced unpaired
    _results(tmp_path / "u", {(64, "none"): A, (64, "weight"): B})
    forced = f"? {_cell('u', 64, 'none')} vs {_cell('u', 64, 'weight')} | unpaired"
    assert _render(pages, tmp_path, forced) == stats.verdict(welch)


def test_no_difference_states_what_the_interval_admits(pages, tmp_path):
    _results(tmp_path / "s", {(64, "none"): A, (64, "weight"): [0.35, 0.20, 0.41]})
    text = _render(pages, tmp_path, f"? {_cell('s', 64, 'none')} vs {_cell('s', 64, 'weight')}")
    assert text.startswith("no difference detected: ") and "the interval admits ±" in text
    assert "within noise" not in text


def test_percent_reads_fractions_as_points(pages, tmp_path):
    _results(tmp_path / "s", {(64, "none"): A, (64, "weight"): B})
    body = f"? {_cell('s', 64, 'none', 'accuracy')} vs {_cell('s', 64, 'weight', 'accuracy')}"
    at_half = lambda v: [0.8 + x / 10 for x in v]  # noqa: E731 - the λ = ½ accuracies written
    plain = stats.compare(dict(enumerate(at_half(A))), dict(enumerate(at_half(B))))
    assert plain.n == 3  # one value per pair even though λ rows differ: see the error test
    with pytest.raises(pages.PageError, match="different values"):
        _render(pages, tmp_path, body)  # accuracy differs across λ: name one
    body = body.replace("method=none", "method=none, lam=0.5").replace(
        "method=weight", "method=weight, lam=0.5"
    )
    scaled = stats.compare(
        {k: 100 * v for k, v in enumerate(at_half(A))},
        {k: 100 * v for k, v in enumerate(at_half(B))},
    )
    assert _render(pages, tmp_path, body + " | %") == stats.verdict(scaled)


def test_per_pair_ratios_against_a_threshold(pages, tmp_path):
    plain = [1.0, 2.0, 4.0]
    learned = [0.05, 0.3, 0.2]  # ratios 0.05, 0.15, 0.05: one pair above 0.1
    _results(tmp_path / "s", {(64, "none"): plain, (64, "learned"): learned})
    body = f"ratio {_cell('s', 64, 'learned')} / {_cell('s', 64, 'none')} | 0.1"
    text = _render(pages, tmp_path, body)
    r = stats.ratios(dict(enumerate(learned)), dict(enumerate(plain)), 0.1)
    assert text == stats.ratio_verdict(r)
    assert text.startswith("above 0.1 in 1 of 3 pairs: ")
    # the mean of the ratios, not the ratio of the means
    assert r.cell.mean == pytest.approx(np.mean([0.05, 0.15, 0.05]))
    assert r.cell.mean != pytest.approx(np.mean(learned) / np.mean(plain))
    ratios_only = _render(pages, tmp_path, body.replace(" | 0.1", ""))
    assert ratios_only == stats.cell_text(r.cell)
    # over several widths, keyed by width and pair
    _results(
        tmp_path / "w",
        {
            (64, "none"): plain,
            (64, "learned"): learned,
            (128, "none"): plain,
            (128, "learned"): [0.01, 0.02, 0.03],
        },
    )
    wide = (
        "ratio [w/results.csv: method=learned | calibrated_midpoint_loss_barrier] / "
        "[w/results.csv: method=none | calibrated_midpoint_loss_barrier] | 0.1 | by=width,pair"
    )
    assert _render(pages, tmp_path, wide).startswith("above 0.1 in 1 of 6 pairs: ")


def test_fewer_than_three_pairs_give_no_verdict(pages, tmp_path):
    _results(tmp_path / "s", {(64, "none"): A[:2], (64, "weight"): B[:2]})
    few = "too few pairs (n = 2 < 3): no verdict"
    assert (
        _render(pages, tmp_path, f"? {_cell('s', 64, 'none')} vs {_cell('s', 64, 'weight')}") == few
    )
    ratio = f"ratio {_cell('s', 64, 'weight')} / {_cell('s', 64, 'none')} | 0.1"
    assert _render(pages, tmp_path, ratio) == few
    assert _render(pages, tmp_path, f"n? {_cell('s', 64, 'none')} | it connects") == few
    (tmp_path / "s" / "results.csv").unlink()  # a summary row alone still knows its n
    summary = "[s/table1.csv: width=64, method={} | calibrated_midpoint_loss_barrier]"
    assert (
        _render(pages, tmp_path, f"? {summary.format('none')} vs {summary.format('weight')}") == few
    )
    _results(tmp_path / "t", {(64, "none"): A})
    assert _render(pages, tmp_path, f"n? {_cell('t', 64, 'none')} | it connects") == "it connects"


def test_a_summary_row_must_agree_with_its_pairs(pages, tmp_path):
    _results(tmp_path / "s", {(64, "none"): A, (64, "weight"): B})
    table = tmp_path / "s" / "table1.csv"
    table.write_text(table.read_text().replace(str(np.mean(A)), "0.5"))
    summary = "[s/table1.csv: width=64, method={} | calibrated_midpoint_loss_barrier]"
    with pytest.raises(pages.PageError, match="gives 3 values"):
        _render(pages, tmp_path, f"? {summary.format('none')} vs {summary.format('weight')}")


def test_run_times_come_from_study_json(pages, tmp_path):
    folder = tmp_path / "s"
    folder.mkdir()
    assert _render(pages, tmp_path, "runtime s") == "run time not recorded"
    record = {
        "wall_seconds": 532.7,
        "jobs": {"total": 3, "run": 3, "reused": 0},
        "environment": {"cpu_count": 2},
    }
    (folder / "study.json").write_text(json.dumps(record))
    assert _render(pages, tmp_path, "runtime s") == "8.9 min recorded on 2 cores (all 3 jobs run)"
    record.update(wall_seconds_all=600.0, history=[{"wall_seconds": 67.3}])
    record["jobs"] = {"total": 4, "run": 1, "reused": 3}
    (folder / "study.json").write_text(json.dumps(record))
    assert _render(pages, tmp_path, "runtime s") == (
        "10.0 min recorded on 2 cores (1 of 4 jobs run, the rest reused)"
    )


# ---- mutation: a hand-edited verdict or run time fails the check ------------------------------
def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", root / "docs")
    shutil.copy(ROOT / "README.md", root / "README.md")
    return root


def _block(text: str, name: str) -> str:
    return re.search(rf"BEGIN generated: {name} -->\n(.*?)<!-- END", text, re.S).group(1)


@pytest.mark.parametrize(
    ("where", "pattern", "edit"),
    [
        ("docs/findings.md:why-width", "higher in every pair", "lower in every pair"),
        ("docs/findings.md:why-width", "no difference detected", "no difference"),
        ("docs/findings.md:findings", r"too few pairs \(n = 2 < 3\): no verdict", "within noise"),
        ("docs/experiments.md:recipes", r"\d+\.\d min recorded", "2 min recorded"),
        ("README.md:demo", r"lower in every pair", "within noise"),
        ("docs/results/why-width-fmnist-mlp/README.md", "higher in every pair", "within noise"),
        ("docs/results/beyond-perm-fmnist-vit/README.md", r"above 0\.1 in \d of", "at most 0.1 in"),
        (
            "docs/results/rebasin-onset-fmnist-mlp/README.md",
            r"wall time \d+\.\d min",
            "wall time 2 min",
        ),
    ],
)
def test_a_hand_edited_verdict_or_run_time_fails_the_check(pages, tmp_path, where, pattern, edit):
    root = _copy(tmp_path)
    assert pages.stale(root) == []  # the committed text is what the files give
    path, _, block = where.partition(":")
    file = root / path
    text = file.read_text()
    scope = _block(text, block) if block else text
    found = re.search(pattern, scope)
    assert found, f"{pattern!r} is not in {where}: the check would test nothing"
    edited_scope = scope[: found.start()] + edit + scope[found.end() :]
    file.write_text(text.replace(scope, edited_scope, 1))
    assert pages.stale(root) == [file]
