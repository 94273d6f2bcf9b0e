"""The report of a counterexample study (``experiment = "counterexample"``, Git Re-Basin App. A.6).

Reads ``study.json``, ``barriers.csv``, ``paths.csv`` and ``study.toml`` (optional) of a
folder written by :mod:`lmc.experiments.counterexample_study` and writes ``report.md``,
``report.html`` and ``figures/counterexample_paths.{png,svg}``: the verdict on the paper's
claim (every permutation of B's hidden units leaves a barrier), the barrier of each
permutation, and the loss and accuracy along every path. Never computes a model: the numbers
are the files'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmc.config import LmcError

from .document import Block, Heading, Note, Para, Table
from .figures import Plot
from .page import Figures, Page, read_record
from .style import finish_axes, new_figure, render


@dataclass(frozen=True)
class RecordedPath:
    """One permutation's path as recorded (what ``draw_counterexample_paths`` draws)."""

    label: str
    lambdas: list[float]
    loss: list[float]
    accuracy: list[float]
    max_minus_mean_loss: float
    accuracy_barrier: float


def _read(folder: Path) -> tuple[dict[str, Any], str | None, list[dict], list[RecordedPath]]:
    from lmc.experiments import read_csv

    record, toml = read_record(folder, ("barriers.csv", "paths.csv"))
    barriers = read_csv(folder / "barriers.csv")
    rows = read_csv(folder / "paths.csv")
    paths = []
    for row in barriers:
        points = sorted(
            (r["lambda"], r["loss"], r["accuracy"])
            for r in rows
            if r["permutation"] == row["permutation"]
        )
        if not points:
            raise LmcError(f"{folder / 'paths.csv'} has no rows for {row['permutation']}")
        lams, losses, accs = (list(v) for v in zip(*points))
        paths.append(
            RecordedPath(
                row["permutation"],
                lams,
                losses,
                accs,
                row["max_minus_mean_loss"],
                row["accuracy_barrier"],
            )
        )
    return record, toml, barriers, paths


def _is_identity(row: dict) -> bool:
    return str(row.get("identity")).lower() == "true"


def verdict(barriers: list[dict]) -> str:
    """One sentence on the claim, from the recorded barriers."""
    worst = min(barriers, key=lambda r: r["max_minus_mean_loss"])
    positive = [r for r in barriers if r["max_minus_mean_loss"] > 0]
    accuracy = min(r["accuracy_barrier"] for r in barriers)
    if len(positive) == len(barriers):
        return (
            f"**Confirmed:** all {len(barriers)} permutations of B's hidden units leave a "
            f"barrier. The smallest loss barrier (max − mean) is "
            f"{worst['max_minus_mean_loss']:.3f} nats (permutation {worst['permutation']}), "
            f"and every path loses at least {100 * accuracy:.1f} points of accuracy on the "
            "way, although both endpoints are perfect classifiers."
        )
    return (
        f"**Not confirmed:** {len(barriers) - len(positive)} of {len(barriers)} permutations "
        f"leave no loss barrier (smallest: {worst['max_minus_mean_loss']:.3g} nats, "
        f"permutation {worst['permutation']})."
    )


def _figure(paths: list[RecordedPath]) -> Plot:
    from lmc.experiments.counterexample import draw_counterexample_paths

    fig, axes = new_figure(1, 2, panel=(5.2, 3.8))
    for ax, metric in zip(axes[0], ("loss", "accuracy")):
        draw_counterexample_paths(ax, paths, metric)
        ax.set_title("loss along each path" if metric == "loss" else "accuracy along each path")
        finish_axes(ax)
    fig.suptitle("Git Re-Basin counterexample: every permutation of B leaves a barrier")
    caption = (
        "Loss (mean cross-entropy, nats; left) and accuracy (right) along "
        "θ(λ) = (1 − λ)θ_A + λ·π(θ_B) for each permutation π of B's hidden units "
        "(λ = 0 is A); legends give each path's barrier (loss: max − mean, nats; accuracy: "
        "the accuracy barrier, as a fraction)."
    )
    return Plot("counterexample_paths", "Paths between the two solutions", caption, render(fig))


def _table(barriers: list[dict]) -> Table:
    def pct(v: float) -> str:
        return f"{100 * v:.1f}" if math.isfinite(v) else "undefined"

    rows = [
        [
            f"`{r['permutation']}`" + (" (identity)" if _is_identity(r) else ""),
            f"{r['max_minus_mean_loss']:.3f}",
            f"{r['loss_barrier']:.3f}",
            pct(r["accuracy_barrier"]),
            f"{r['midpoint_loss']:.3f}",
            pct(r["midpoint_accuracy"]),
        ]
        for r in barriers
    ]
    first = barriers[0]
    return Table(
        [
            "permutation π of B",
            "loss barrier, max − mean (nats)",
            "loss barrier, Frankle (nats)",
            "accuracy barrier (points)",
            "midpoint loss (nats)",
            "midpoint accuracy (%)",
        ],
        rows,
        caption=(
            f"Endpoints: A {first['loss_a']:.3f} nats, {pct(first['accuracy_a'])} %; "
            f"B {first['loss_b']:.3f} nats, {pct(first['accuracy_b'])} % (the loss is not 0: "
            "on the quadrant x₁ ≥ 0, x₂ > 0 both logits tie, which costs log 2 per point)."
        ),
        align=["l", "r", "r", "r", "r", "r"],
    )


#: The claim the counterexample report checks (its first paragraph).
CLAIM = (
    "Git Re-Basin (App. A.6) claims that some loss landscapes hold two solutions that no "
    "permutation connects linearly. The task: x ∼ U([−1, 1]²), y = 1[x₁ < 0 and x₂ > 0]; the "
    "model: two hidden layers of two ReLU units. Solution A tests x₁ < 0 in its first hidden "
    "layer and x₂ > 0 in its second; B tests them in the opposite layers. Each of the "
    "2!·2! = 4 permutations π of B's hidden units gives a network π(B) computing B's "
    "function; a barrier on the path from A to every π(B) means no permutation connects them."
)


def counterexample_page(folder: Path, title: str | None = None, quiet: bool = True) -> Page:
    """The counterexample's report of the results folder ``folder`` (module docstring), as
    :func:`lmc.report.write_report` writes it."""
    record, toml, barriers, paths = _read(folder)
    if not barriers:
        raise LmcError(f"{folder / 'barriers.csv'} has no rows")
    settings = record.get("config", {}).get("counterexample", {})
    setup = Note(
        f"{settings.get('n', '?')} points (seed {settings.get('seed', '?')}), "
        f"{len(paths[0].lambdas)} values of λ, logit scale k = {settings.get('scale', '?')}."
    )

    def body(figures: Figures) -> list[Block]:
        path_figure = figures.block(_figure(paths))
        return [
            Para(CLAIM),
            Para(verdict(barriers)),
            Heading(2, "Barriers"),
            _table(barriers),
            Heading(2, "Paths"),
            path_figure,
            setup,
        ]

    title = title or f"Git Re-Basin's counterexample ({record.get('name', 'counterexample')})"
    return Page(title, body, record, folder, toml)
