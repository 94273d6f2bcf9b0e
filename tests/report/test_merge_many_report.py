"""The merge-many report speaks lmc.stats: the models' 95 % t-interval, the methods the study
ran described by their records, and the methods compared paired over sets (issue 43)."""

from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
from matplotlib.container import BarContainer
from scipy import stats as scipy_stats

from lmc import stats
from lmc.experiments.merge_many_study import MODEL_COLUMNS, RELIABILITY_COLUMNS
from lmc.perm.methods import get_method
from lmc.report import merge_many, write_report

METHODS = ["none", "weight", "canonical", "learned"]
#: Test losses of each set's four models (nats) and their accuracies (fractions).
MODEL_LOSS = {
    "a": [2.0, 2.1, 2.3, 2.6],
    "b": [2.2, 2.4, 2.1, 2.5],
    "c": [1.9, 2.0, 2.4, 2.3],
}
MODEL_ACC = {
    "a": [0.30, 0.32, 0.35, 0.41],
    "b": [0.31, 0.33, 0.36, 0.30],
    "c": [0.34, 0.29, 0.33, 0.35],
}
ENSEMBLE = {"a": (2.05, 0.37), "b": (2.15, 0.36), "c": (2.0, 0.38)}
#: (loss, accuracy) of each merge per set: `learned` is `none` minus 0.1, 0.2, 0.3 nats and
#: plus 2, 3, 4 percentage points.
MERGED = {
    "none": {"a": (4.0, 0.08), "b": (4.1, 0.10), "c": (3.9, 0.09)},
    "weight": {"a": (3.7, 0.08), "b": (3.9, 0.07), "c": (3.6, 0.11)},
    "canonical": {"a": (3.8, 0.11), "b": (3.85, 0.10), "c": (3.95, 0.12)},
    "learned": {"a": (3.9, 0.10), "b": (3.9, 0.13), "c": (3.6, 0.13)},
}


def _write(
    folder: Path, sets: list[str], entries: list[dict] | None = None, extra: dict | None = None
) -> Path:
    """A merge-many results folder of ``sets`` (study.json, models.csv, reliability.csv) with
    the numbers above; ``entries``: the ``[[sets]]`` entries (default: repeats of one
    condition, told apart by ``seed``); ``extra``: set name -> (models' losses, models'
    accuracies, ensemble (loss, accuracy), method -> (loss, accuracy)) of further sets."""
    extra = extra or {}
    model_loss = {**MODEL_LOSS, **{s: e[0] for s, e in extra.items()}}
    model_acc = {**MODEL_ACC, **{s: e[1] for s, e in extra.items()}}
    ensemble = {**ENSEMBLE, **{s: e[2] for s, e in extra.items()}}
    merged = {m: {**MERGED[m], **{s: e[3][m] for s, e in extra.items()}} for m in METHODS}
    folder.mkdir(parents=True, exist_ok=True)
    if entries is None:
        entries = [
            {"name": s, "models": 4, "subset": "all", "train_fraction": None,
             "label_parts": None, "seed": 4 * i}
            for i, s in enumerate(sets)
        ]  # fmt: skip
    config = {
        "experiment": "merge-many",
        "name": "tiny-mm-report",
        "data": {"dataset": "digits", "split": "test"},
        "model": {"name": "mlp"},
        "merge_many": {"width": 16, "methods": METHODS, "ece_bins": 15, "reference": False},
        "sets": entries,
    }
    record = {"name": "tiny-mm-report", "experiment": "merge-many", "config": config}
    (folder / "study.json").write_text(json.dumps(record))
    rows = []
    for s in sets:
        for i, (loss, acc) in enumerate(zip(model_loss[s], model_acc[s])):
            rows.append({"set": s, "role": "model", "index": i, "run": f"run-{s}{i}",
                         "test_loss": loss, "test_accuracy": acc, "test_ece": 0.01,
                         "train_examples": 100})  # fmt: skip
        loss, acc = ensemble[s]
        rows.append({"set": s, "role": "ensemble", "test_loss": loss, "test_accuracy": acc,
                     "test_ece": 0.02})  # fmt: skip
        for method in METHODS:
            loss, acc = merged[method][s]
            info = {"rounds": 3, "converged": True} if method == "weight" else {}
            rows.append({"set": s, "role": "merged", "method": method, "test_loss": loss,
                         "test_accuracy": acc, "test_ece": 0.03, **info})  # fmt: skip
    with open(folder / "models.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, MODEL_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    with open(folder / "reliability.csv", "w", newline="") as f:
        csv.DictWriter(f, RELIABILITY_COLUMNS).writeheader()
    return folder


def _report(folder: Path) -> str:
    return Path(write_report(folder)["report_md"]).read_text(encoding="utf-8")


def _table(text: str, caption_start: str) -> dict[str, list[str]]:
    """The Markdown table after the line starting with ``caption_start``: first cell -> the
    other cells."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(caption_start))
    out = {}
    for line in lines[start + 1 :]:
        if not line.strip():
            if out:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        out[cells[0]] = cells[1:]
    return out


def _values(method: str, sets: list[str], which: int, scale: float) -> dict[str, float]:
    return {s: scale * MERGED[method][s][which] for s in sets}


def test_three_sets_give_the_verdicts_lmc_stats_gives(tmp_path):
    sets = ["a", "b", "c"]
    text = _report(_write(tmp_path / "out", sets))
    assert "## Methods compared, paired over sets" in text
    assert text.index("## Summary") < text.index("## Methods compared") < text.index("## Sets")
    for which, scale, caption in ((0, 1.0, "test loss (nats)"),
                                  (1, 100.0, "test accuracy (percentage points)")):  # fmt: skip
        table = _table(text, f"{caption}: merge − baseline")
        assert table["merge"] == ["merge − none (plain average)", "merge − the models' mean",
                                  "merge − ensemble"]  # fmt: skip
        for method in METHODS:
            mine = _values(method, sets, which, scale)
            models = {s: scale * float(np.mean((MODEL_LOSS, MODEL_ACC)[which][s])) for s in sets}
            ensemble = {s: scale * ENSEMBLE[s][which] for s in sets}
            expected = [
                "—" if method == "none" else stats.verdict(stats.compare(
                    _values("none", sets, which, scale), mine)),
                stats.verdict(stats.compare(models, mine)),
                stats.verdict(stats.compare(ensemble, mine)),
            ]  # fmt: skip
            assert table[f"merged ({method})"] == expected, (caption, method)

    # by hand: learned − none is −0.1, −0.2, −0.3 nats and +2, +3, +4 pp
    loss_p = scipy_stats.ttest_rel([3.9, 3.9, 3.6], [4.0, 4.1, 3.9]).pvalue
    acc_p = scipy_stats.ttest_rel([10, 13, 13], [8, 10, 9]).pvalue
    # −0.20 ± t(0.975, 2)·0.1/√3 = ± 0.248: the interval holds 0
    loss = (f"no difference detected: −0.20 ± 0.25 (higher in 0 of 3 pairs, p = {loss_p:#.2g}); "
            "the interval admits ±0.45")  # fmt: skip
    acc = f"higher in every pair: +3.0 ± 2.5 (3 pairs, p = {acc_p:#.2g})"  # 4.303·1/√3 = 2.48
    assert _table(text, "test loss (nats): merge")["merged (learned)"][0] == loss
    assert _table(text, "test accuracy (percentage points): merge")["merged (learned)"][0] == acc
    assert "here a pair is a set" in text and "too few pairs (n = 2 < 3): no verdict" in text


def test_two_sets_give_no_verdict(tmp_path):
    text = _report(_write(tmp_path / "out", ["a", "b"]))
    section = text.split("## Methods compared, paired over sets", 1)[1].split("## Sets", 1)[0]
    assert "Sets `a`, `b`, every merge against every baseline: too few pairs (n = 2 < 3): " in (
        section
    )
    assert "| merge |" not in section  # no table of verdicts that are not there
    assert "lower in" not in section and "higher in" not in section


def test_sets_of_different_conditions_are_not_paired(tmp_path):
    sets = ["a", "b", "c", "d"]
    entries = [
        {"name": "a", "models": 4, "subset": "all", "seed": 0},
        {"name": "b", "models": 4, "subset": "all", "seed": 4},
        {"name": "c", "models": 4, "subset": "all", "seed": 8},
        {"name": "d", "models": 4, "subset": "random", "train_fraction": 0.5},
    ]
    # a set of another condition whose learned merge is far worse: pooled, it would count
    merges = {m: (9.0 if m == "learned" else 1.0, 0.5) for m in METHODS}
    d = ([2.5] * 4, [0.2] * 4, (2.4, 0.25), merges)
    text = _report(_write(tmp_path / "out", sets, entries, {"d": d}))
    assert "### Sets `a`, `b`, `c`" in text and "### Set `d` alone" in text
    assert "Set `d`, every merge against every baseline: too few pairs (n = 1 < 3)" in text
    pooled = _table(text, "test loss (nats): merge − baseline, paired by set · sets `a`, `b`, `c`")
    first = {s: MERGED["none"][s][0] for s in "abc"}
    second = {s: MERGED["learned"][s][0] for s in "abc"}
    assert pooled["merged (learned)"][0] == stats.verdict(stats.compare(first, second))


def test_the_models_row_is_the_mean_and_its_95_percent_t_interval(tmp_path, monkeypatch):
    bars = []  # the loss panel's bar containers, read before the figure is rendered (cleared)
    render = merge_many.render
    monkeypatch.setattr(
        merge_many, "render", lambda fig: bars.append(list(fig.axes[1].containers)) or render(fig)
    )
    text = _report(_write(tmp_path / "out", ["a", "b", "c"]))
    losses = MODEL_LOSS["a"]  # 2.0, 2.1, 2.3, 2.6: mean 2.25, s = √0.07
    half = scipy_stats.t.ppf(0.975, 3) * statistics.stdev(losses) / math.sqrt(4)
    assert f"{half:.3f}" == "0.421"  # 3.182 · 0.2646 / 2
    row = _table(text, "| model |")  # the first set table: set `a`
    models = row["models (mean ± 95 % interval, n = 4)"]
    assert models[1] == "2.250 ± 0.421"
    accs = [100 * v for v in MODEL_ACC["a"]]
    acc_half = scipy_stats.t.ppf(0.975, 3) * statistics.stdev(accs) / 2
    assert models[0] == f"{statistics.mean(accs):.2f} ± {acc_half:.2f}"
    assert "mean ± std" not in text
    # the bars' error bars: the same half-width (loss panel, models' bars, set `a` first)
    models_bars = next(c for c in bars[0] if isinstance(c, BarContainer))
    assert models_bars.get_label() == "models (mean ± 95 % interval)"
    (low, high) = models_bars.errorbar.lines[2][0].get_segments()[0][:, 1]
    assert high - low == pytest.approx(2 * half) and (low + high) / 2 == pytest.approx(2.25)
    assert "95 % t-interval over the set's models" in text


def test_the_method_paragraph_names_the_methods_the_study_ran(tmp_path):
    text = _report(_write(tmp_path / "out", ["a", "b", "c"]))
    method_list = text.split("The methods:", 1)[1].split("## Summary", 1)[0]
    canonical = get_method("canonical")
    assert f"`canonical` ({canonical.label})" in method_list
    assert canonical.description in method_list
    assert "`learned`" in method_list and get_method("learned").description in method_list
    assert "`none`" in method_list and "plain average" in method_list
    assert "merge-many" in method_list
    assert "merged by 4 methods" in text


def _section(text: str) -> str:
    return text.split("## Methods compared, paired over sets", 1)[1].split("## Sets", 1)[0]


def test_sets_that_share_models_are_not_paired(tmp_path):
    """Model i of a set trains with its seed + i: sets seeded 0 and 2 with 4 models share two
    models, so they are not independent repeats (no verdict, though 3 sets are there)."""
    entries = [{"name": s, "models": 4, "subset": "all", "seed": seed}
               for s, seed in (("a", 0), ("b", 2), ("c", 8))]  # fmt: skip
    section = _section(_report(_write(tmp_path / "out", ["a", "b", "c"], entries)))
    assert "Sets `a`, `b`, `c`: models that may be in common (their seeds overlap" in section
    assert "lower in" not in section and "higher in" not in section and "| merge |" not in section


def test_a_set_without_a_seed_counts_from_the_study_seed(tmp_path):
    """An entry without ``seed`` uses the study's: with the study seed 0 it is the set seeded
    0, the same models."""
    entries = [{"name": "a", "models": 4, "subset": "all"},
               {"name": "b", "models": 4, "subset": "all", "seed": 0},
               {"name": "c", "models": 4, "subset": "all", "seed": 8}]  # fmt: skip
    folder = _write(tmp_path / "out", ["a", "b", "c"], entries)
    record = json.loads((folder / "study.json").read_text())
    record["config"]["merge_many"]["seed"] = 0
    (folder / "study.json").write_text(json.dumps(record))
    assert "seeds overlap" in _section(_report(folder))


def test_sets_without_recorded_entries_are_not_compared(tmp_path):
    section = _section(_report(_write(tmp_path / "out", ["a", "b", "c"], entries=[])))
    assert "no `[[sets]]` entry in study.json" in section
    assert "lower in" not in section and "higher in" not in section


def test_numeric_set_names_stay_names(tmp_path):
    """A set named ``1`` is read as the text it is (not 1.0), so it meets its entry and is
    paired with its repeats only."""
    names = ["1", "2", "3"]
    rename = dict(zip("abc", names))
    folder = _write(tmp_path / "out", ["a", "b", "c"])
    record = json.loads((folder / "study.json").read_text())
    for entry in record["config"]["sets"]:
        entry["name"] = rename[entry["name"]]
    (folder / "study.json").write_text(json.dumps(record))
    with open(folder / "models.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row["set"] = rename[row["set"]]
    with open(folder / "models.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, MODEL_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    text = _report(folder)
    assert "### Set `1`" in text and "1.0" not in _section(text)
    table = _table(text, "test loss (nats): merge − baseline, paired by set · sets `1`, `2`, `3`")
    first = {s: MERGED["none"][s][0] for s in "abc"}
    second = {s: MERGED["learned"][s][0] for s in "abc"}
    assert table["merged (learned)"][0] == stats.verdict(stats.compare(first, second))


def test_a_weight_merge_without_rounds_is_reported(tmp_path):
    """A models.csv whose weight merge has no ``rounds`` (an older or hand-made file) still
    gives a report; its table says nothing of rounds."""
    folder = _write(tmp_path / "out", ["a", "b", "c"])
    with open(folder / "models.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row["rounds"] = row["converged"] = ""
    with open(folder / "models.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, MODEL_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    text = _report(folder)
    assert "## Sets" in text and " rounds" not in text.split("## Sets", 1)[1].split("##", 1)[0]
