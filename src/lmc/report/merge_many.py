"""The report of a merge-many study (``experiment = "merge-many"``; Git Re-Basin §5.4, App. A.10).

Reads ``study.json``, ``models.csv``, ``reliability.csv`` and ``study.toml`` (optional) of a
folder written by :mod:`lmc.experiments.merge_many_study` and writes ``report.md``,
``report.html`` and figures: per set, the merged models against each model, the models'
ensemble and the reference model (trained on all the data) in test loss (nats), accuracy and
ECE, a bar figure of the three, and reliability diagrams. Never computes a model.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from lmc.config import LmcError

from .document import Block, Heading, Para, Table
from .figures import Plot
from .page import Figures, Page, read_record
from .results import mean_std, read_csv
from .style import REFERENCE, finish_axes, method_style, new_figure, render

METRICS = (
    ("test_accuracy", "accuracy (%)", 100.0),
    ("test_loss", "loss (nats)", 1.0),
    ("test_ece", "ECE (%)", 100.0),
)
#: Columns of the comparison, in order: (label, colour).
ENTRY_COLOURS = {
    "models (mean)": "#999999",
    "ensemble": "#009E73",
    "reference": REFERENCE,
}


def _entries(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """The set's compared entries in order: the models (one entry, all rows), the ensemble,
    each merge, the reference."""
    models = [r for r in rows if r["role"] == "model"]
    out = [("models (mean)", models)]
    out += [("ensemble", [r]) for r in rows if r["role"] == "ensemble"]
    merged = sorted((r for r in rows if r["role"] == "merged"), key=lambda r: r["method"] != "none")
    out += [(f"merged ({r['method']})", [r]) for r in merged]
    out += [("reference", [r]) for r in rows if r["role"] == "reference"]
    return out


def _colour(label: str) -> str:
    if label.startswith("merged ("):
        return method_style(label[len("merged (") : -1])[0]
    return ENTRY_COLOURS.get(label, "#000000")


def _sets(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for row in rows:
        out.setdefault(str(row["set"]), []).append(row)
    return out


def _fmt(value: float, scale: float, digits: int) -> str:
    return f"{scale * value:.{digits}f}" if math.isfinite(value) else "–"


def set_table(name: str, rows: list[dict], entry: dict[str, Any]) -> Table:
    body = []
    for label, group in _entries(rows):
        cells = [label if label != "models (mean)" else f"models (mean ± std of {len(group)})"]
        for column, _, scale in METRICS:
            mean, std, _ = mean_std(r[column] for r in group)
            digits = 3 if scale == 1.0 else 2
            text = _fmt(mean, scale, digits)
            if len(group) > 1:
                text += f" ± {_fmt(std, scale, digits)}"
            cells.append(text)
        extra = ""
        if label.startswith("merged (weight)"):
            r = group[0]
            extra = f"{int(r['rounds'])} rounds" + (
                "" if str(r["converged"]) == "True" else ", not converged"
            )
        cells.append(extra)
        body.append(cells)
    for r in (r for r in rows if r["role"] == "model"):
        cells = [f"model {int(r['index'])} ({int(r['train_examples'])} examples)"]
        cells += [_fmt(r[c], s, 3 if s == 1.0 else 2) for c, _, s in METRICS]
        body.append([*cells, ""])
    return Table(
        ["model", "test accuracy (%)", "test loss (nats)", "ECE (%)", "alignment"],
        body,
        caption=f"Set `{name}`: {_describe(entry)}. Values from `models.csv`.",
        align=["l", "r", "r", "r", "l"],
    )


def _describe(entry: dict[str, Any]) -> str:
    n = entry.get("models", "?")
    subset = entry.get("subset", "all")
    if subset == "random":
        share = f"{entry.get('train_fraction', 0):.0%}"
        return f"{n} models, each on its own random {share} of the training split"
    if subset == "labels":
        parts = entry.get("label_parts")
        return f"{n} models on disjoint training subsets chosen by label (`label_parts` {parts})"
    return f"{n} models of different seeds, each on the same training data"


def verdict(name: str, rows: list[dict]) -> str:
    """One sentence per set, from the recorded numbers."""
    by = dict(_entries(rows))
    models = by.get("models (mean)", [])
    acc = mean_std(r["test_accuracy"] for r in models)[0]
    best = max((r["test_accuracy"] for r in models), default=math.nan)
    parts = [f"`{name}`: the models reach {100 * acc:.1f} % on average (best {100 * best:.1f} %)"]
    merges = [label for label in by if label.startswith("merged (")]
    for label in (*merges, "ensemble", "reference"):
        if label in by:
            r = by[label][0]
            parts.append(
                f"{label} {100 * r['test_accuracy']:.1f} % (ECE {100 * r['test_ece']:.1f} %)"
            )
    text = "; ".join(parts) + "."
    if "merged (weight)" in by:
        merged = by["merged (weight)"][0]["test_accuracy"]
        if merged > best:
            text += " The weight-matched merge beats every model it merges."
        elif merged > acc:
            text += " The weight-matched merge beats the models' average, not the best model."
        else:
            text += " The weight-matched merge does not beat the models' average."
    return text


def _bars(sets: dict[str, list[dict]], title: str) -> Plot:
    fig, axes = new_figure(1, len(METRICS), panel=(max(3.6, 1.2 * len(sets) + 2.2), 3.4))
    labels = list(dict.fromkeys(label for rows in sets.values() for label, _ in _entries(rows)))
    width = 0.8 / max(len(labels), 1)
    positions = np.arange(len(sets))
    for ax, (column, name, scale) in zip(axes[0], METRICS):
        for j, label in enumerate(labels):
            means, stds = [], []
            for rows in sets.values():
                group = dict(_entries(rows)).get(label, [])
                mean, std, _ = mean_std(r[column] for r in group)
                means.append(scale * mean)
                stds.append(scale * std if len(group) > 1 else 0.0)
            ax.bar(
                positions + (j - (len(labels) - 1) / 2) * width,
                means,
                width,
                yerr=stds if any(stds) else None,
                color=_colour(label),
                label=label,
                capsize=2,
            )
        ax.set_xticks(positions, list(sets))
        ax.set_ylabel(name)
        finish_axes(ax)
    axes[0][-1].legend(frameon=False, fontsize=7.5)
    fig.suptitle(title, fontsize=10)
    caption = (
        "Test accuracy, loss (nats) and expected calibration error per set: the models "
        "(mean, error bar ± std), their ensemble (averaged logits), the merges (none: plain "
        "weight average; weight: Git Re-Basin's iterative merge-many) and the reference model "
        "trained on the whole training split."
    )
    return Plot("merge_many", "Merged models against their inputs", caption, render(fig))


def _curve(rows: list[dict]):
    from lmc.metrics import ReliabilityCurve

    rows = sorted(rows, key=lambda r: r["bin"])
    edges = np.array([rows[0]["lower"], *(r["upper"] for r in rows)], dtype=float)
    return ReliabilityCurve(
        edges=edges,
        counts=np.array([int(r["count"]) for r in rows]),
        confidence=np.array([r["confidence"] for r in rows], dtype=float),
        accuracy=np.array([r["accuracy"] for r in rows], dtype=float),
    )


def _reliability(curves: list[dict], sets: list[str]) -> Plot | None:
    from lmc.metrics import draw_reliability_diagram

    wanted = ("model 0", "ensemble", "merged (weight)", "merged (none)", "reference")
    by: dict[tuple[str, str], list[dict]] = {}
    for r in curves:
        by.setdefault((str(r["set"]), str(r["label"])), []).append(r)
    columns = [w for w in wanted if any((s, w) in by for s in sets)]
    if not columns:
        return None
    fig, axes = new_figure(len(sets), len(columns), panel=(2.9, 2.9))
    for i, name in enumerate(sets):
        for j, label in enumerate(columns):
            ax = axes[i][j]
            if (name, label) not in by:
                ax.set_axis_off()
                continue
            draw_reliability_diagram(ax, _curve(by[(name, label)]))
            ax.set_title(f"{name}: {label}\n{ax.get_title()}", fontsize=7.5)
            ax.legend().set_visible(i == 0 and j == 0)
    caption = (
        "Reliability diagrams (equal-width confidence bins): per-bin accuracy against the "
        "bin's mean confidence, the hatched gap to it, the diagonal of perfect calibration; "
        "each panel's title gives its ECE."
    )
    return Plot("reliability", "Reliability diagrams", caption, render(fig))


def merge_many_page(folder: Path, title: str | None = None, quiet: bool = True) -> Page:
    """The merge-many study's report of the results folder ``folder`` (module docstring), as
    :func:`lmc.report.write_report` writes it."""
    record, toml = read_record(folder, ("models.csv", "reliability.csv"))
    rows = read_csv(folder / "models.csv")
    if not rows:
        raise LmcError(f"{folder / 'models.csv'} has no rows")
    sets = _sets(rows)
    config = record.get("config", {})
    entries = {e.get("name"): e for e in config.get("sets", [])}
    data, model = config.get("data", {}), config.get("model", {})
    settings = config.get("merge_many", {})
    width = settings.get("width", "?")
    where = f"{data.get('dataset', '?')} · {model.get('name', '?')} (width {width})"
    title = title or f"Merging many models: {where} ({record.get('name', 'merge-many')})"

    method = Para(
        "Each set's models are merged by averaging their weights as they are (`none`) and "
        "after Git Re-Basin's merge-many (`weight`, App. A.10: every model permuted by weight "
        "matching onto the mean of the others, round after round, until no permutation "
        "changes), then compared with the models, their ensemble (averaged logits) and a "
        f"reference model trained on all the data, on the {data.get('split', 'test')} split; "
        f"ECE over {settings.get('ece_bins', '?')} equal-width confidence bins."
    )

    def body(figures: Figures) -> list[Block]:
        blocks: list[Block] = [method, Heading(2, "Summary")]
        blocks += [Para(verdict(name, set_rows)) for name, set_rows in sets.items()]
        blocks.append(figures.block(_bars(sets, where)))
        blocks.append(Heading(2, "Sets"))
        for name, set_rows in sets.items():
            blocks.append(Heading(3, f"Set `{name}`"))
            blocks.append(set_table(name, set_rows, entries.get(name, {})))
        curves = read_csv(folder / "reliability.csv")
        plot = _reliability(curves, list(sets))
        if plot is not None:
            blocks.append(Heading(2, "Calibration"))
            blocks.append(figures.block(plot))
        return blocks

    return Page(title, body, record, folder, toml)
