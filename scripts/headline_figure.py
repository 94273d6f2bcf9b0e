"""The width paper's headline figure from a width study's table1.csv: the calibrated midpoint
loss barrier (nats) against width on a log axis, per weight decay and method, with the paper's
Table 1 value for its widest MLP (0.056 +- 0.014 nats at 16x a 512 base, i.e. width 8192) marked.
It also prints, per weight decay and method, a least-squares line of the barrier against
log2(width) over the widths from 512 up, and the width where that line reaches zero (if it falls).

    .venv/bin/python scripts/headline_figure.py docs/results/lewc-fmnist-mlp-wide/table1.csv \
        docs/results/lewc-fmnist-mlp-wide/calibrated_barrier_vs_width.png
"""

from __future__ import annotations

import math
import sys

import numpy as np

from lmc.experiments import read_csv
from lmc.experiments.cells import number
from lmc.metrics.figures import new_figure, save_figure

LABELS = {"none": "no permutation", "weight": "weight matching"}
PAPER_WIDTH, PAPER_VALUE, PAPER_STD = 8192, 0.056, 0.014


def main(table: str, out: str) -> None:
    rows = read_csv(table)
    fig, axes = new_figure(1, 1, panel=(6.0, 4.0))
    ax = axes[0, 0]
    styles = {"none": "-", "weight": "--"}
    for i, wd in enumerate(sorted({number(r["weight_decay"]) for r in rows}, reverse=True)):
        for method in ("none", "weight"):
            cells = sorted(
                (number(r["width"]), r)
                for r in rows
                if number(r["weight_decay"]) == wd and r["method"] == method
            )
            if not cells:
                continue
            widths = [w for w, _ in cells]
            means = [number(r["calibrated_midpoint_loss_barrier_mean"]) for _, r in cells]
            stds = [number(r["calibrated_midpoint_loss_barrier_std"]) for _, r in cells]
            fit = [
                (math.log2(w), m) for w, m in zip(widths, means) if w >= 512 and math.isfinite(m)
            ]
            if len(fit) >= 2:
                slope, intercept = np.polyfit(*zip(*fit), 1)
                zero = f"2^{-intercept / slope:.1f}" if slope < 0 else "never (not falling)"
                print(
                    f"wd {wd:g} {method}: {slope:+.4f} nats per doubling of width "
                    f"(widths {min(w for w in widths if w >= 512):g}-{max(widths):g}); "
                    f"the line reaches 0 at width {zero}"
                )
            ax.errorbar(
                widths, means, yerr=stds, fmt=styles[method], marker="o", color=f"C{i}",
                capsize=3, label=f"wd {wd:g}, {LABELS[method]}",
            )  # fmt: skip
    ax.errorbar(
        [PAPER_WIDTH], [PAPER_VALUE], yerr=[PAPER_STD], fmt="*", color="k", markersize=12,
        capsize=3, label="width paper, Table 1 (MLP, 16x, no permutation)",
    )  # fmt: skip
    ax.axhline(0.0, color="0.5", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("width (hidden units per layer)")
    ax.set_ylabel("calibrated midpoint loss barrier (nats)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save_figure(fig, out, ("png",))


if __name__ == "__main__":
    main(*sys.argv[1:3])
