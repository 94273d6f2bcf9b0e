"""The path figure: loss (and calibrated loss) and accuracy against λ, A (λ = 0) on the left.

Built with matplotlib's object API on the Agg canvas (no pyplot state is touched).
"""

from __future__ import annotations

import os

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from lmc.metrics import PathResult
from lmc.store import atomic_path


def draw_path(axes, result: PathResult, baseline: PathResult | None = None) -> None:
    """Draw ``result`` on two matplotlib axes ``(loss, accuracy)``; a random-direction
    ``baseline``, when given, dashed in the same colours."""
    ax_loss, ax_acc = axes
    curves = [(result, "-", "")] + ([(baseline, "--", " (random direction)")] if baseline else [])
    for res, style, suffix in curves:
        lam = res.lambdas
        ax_loss.plot(lam, res.loss, style, color="C0", marker=".", label=f"loss{suffix}")
        if res.calibrated_loss is not None:
            ax_loss.plot(
                lam, res.calibrated_loss, style, color="C1", marker=".",
                label=f"calibrated loss{suffix}",
            )  # fmt: skip
        ax_acc.plot(lam, res.accuracy, style, color="C2", marker=".", label=f"accuracy{suffix}")
    for ax, values in ((ax_loss, result.loss), (ax_acc, result.accuracy)):
        ax.scatter([0.0, 1.0], [values[0], values[-1]], s=60, color="k", zorder=3)
        ax.set_xticks([0.0, 0.25, 0.5, 0.75, 1.0])
        ax.set_xticklabels(["0\nA", "0.25", "0.5", "0.75", "1\nB"])
        ax.set_xlabel("λ   (θ(λ) = (1 − λ)θ_A + λθ_B)")
        ax.set_xlim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax_loss.set_ylabel("cross-entropy (nats)")
    ax_acc.set_ylabel("accuracy (fraction)")


def path_figure(result: PathResult, baseline: PathResult | None = None, title: str = "") -> Figure:
    """A two-panel figure of the path (see :func:`draw_path`)."""
    fig = Figure(figsize=(10, 4), layout="constrained")
    FigureCanvasAgg(fig)
    draw_path(fig.subplots(1, 2), result, baseline)
    if title:
        fig.suptitle(title, fontsize=9)
    return fig


def plot_path(
    path: str | os.PathLike, result: PathResult, baseline: PathResult | None = None,
    title: str = "",
) -> None:  # fmt: skip
    """Save :func:`path_figure` as a PNG at ``path`` (atomically)."""
    fig = path_figure(result, baseline, title)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
