"""Figures of a layerwise analysis (matplotlib, Agg; no pyplot state is touched).

- ``plot_cosines``: per-layer cosines against depth ℓ, one panel per λ: LEWC, LLFC, endpoint,
  weak additivity and reciprocal cosine, with Theorem 5.4's Gaussian limit for reference.
- ``plot_moments``: per layer, histograms of the per-unit root second moments √E[z~_i²] of A
  and B overlaid (log-spaced bins; exactly-zero units are counted in the panel title).
- ``plot_spectra``: per weight layer, the singular values of W_A and W_B (log scale).

The look is the shared one of :mod:`lmc.metrics.figures` (``new_figure``, ``finish_axes`` on
every panel, ``log_scale`` where values span decades); each figure is saved as PNG at the
print resolution :data:`lmc.metrics.figures.DPI` with an SVG beside it (``cosines.png`` and
``cosines.svg``), atomically. Every ``plot_*`` returns the paths it wrote.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from lmc.metrics.figures import finish_axes, log_scale, new_figure, save_figure

from .layer_metrics import figure_lines
from .theory import GAUSSIAN_RELU_LIMIT

#: (record key, label) of the lines of ``cosines.png`` of the built-in metrics (generated from
#: the metric records, :func:`lmc.analysis.layer_metrics.figure_lines`).
COSINES = figure_lines()


#: The formats every analysis figure is saved in, beside each other.
FORMATS = ("png", "svg")


def _panels(count: int, panel: tuple[float, float] = (3.2, 2.6)) -> tuple[Figure, list]:
    """``count`` panels of ``panel`` inches, at most 4 a row (:func:`new_figure`); the unused
    cells of the last row are hidden."""
    cols = min(count, 4)
    fig, grid = new_figure(math.ceil(count / cols), cols, panel=panel)
    axes = grid.ravel().tolist()
    for ax in axes[count:]:
        ax.set_visible(False)
    return fig, axes[:count]


def _value(v: Any) -> float:
    return math.nan if v is None else float(v)


def plot_cosines(records: Sequence[dict], path: str | os.PathLike) -> list[Path]:
    """One panel per λ of ``records`` (``lmc.analysis`` layer records): the cosines against
    depth, Theorem 5.4's Gaussian ReLU limit dashed. Saved at ``path`` (PNG, SVG beside)."""
    return save_figure(cosines_figure(records), path, FORMATS)


def cosines_figure(records: Sequence[dict]) -> Figure:
    """The figure :func:`plot_cosines` saves: one line per column with a figure label of the
    registered metrics (:func:`lmc.analysis.layer_metrics.figure_lines`) that has a value."""
    lines = figure_lines()
    lams = list(dict.fromkeys(r["lam"] for r in records))
    fig, axes = _panels(len(lams), (4.8, 3.4))
    for ax, lam in zip(axes, lams):
        rows = [r for r in records if r["lam"] == lam]
        layers = [r["layer"] for r in rows]
        for key, label in lines:
            values = [_value(r.get(key)) for r in rows]
            if not all(math.isnan(v) for v in values):
                ax.plot(layers, values, marker="o", label=label)
        ax.axhline(GAUSSIAN_RELU_LIMIT, color="grey", ls="--", lw=0.8, label="Thm 5.4 limit")
        ax.set_xticks(layers, [r["name"] for r in rows], rotation=45, ha="right", fontsize=7)
        ax.set_title(f"λ = {lam:g}  (θ(λ) = (1−λ)θ_A + λθ_B)", fontsize=9)
        ax.set_ylabel("cosine")
        ax.set_ylim(min(0.0, ax.get_ylim()[0]), 1.02)
        finish_axes(ax)
    axes[0].legend(fontsize=7, loc="lower left")
    return fig


def plot_moments(moments: dict[str, dict[str, np.ndarray]], path: str | os.PathLike) -> list[Path]:
    """Per layer (``{name: {"a": (units,), "b": (units,)}}``), histograms of the per-unit root
    second moments of A and B; log-x with log-spaced bins when they span a decade or more.
    Saved at ``path`` (PNG, SVG beside)."""
    fig, axes = _panels(len(moments))
    for ax, (name, sides) in zip(axes, moments.items()):
        finish_axes(ax)
        positive = np.concatenate([m[m > 0] for m in sides.values()])
        if positive.size == 0:
            ax.set_title(f"{name}: all zero", fontsize=8)
            continue
        lo, hi = positive.min(), positive.max()
        log_axis = hi > 10 * lo  # log bins only when the moments span a decade or more
        if hi <= lo:
            bins = np.array([lo * 0.9, lo * 1.1])
        else:
            bins = np.geomspace(lo, hi * 1.0001, 30) if log_axis else np.linspace(lo, hi, 30)
        zeros = []
        for side, color in (("a", "C0"), ("b", "C1")):
            m = sides[side]
            ax.hist(m[m > 0], bins=bins, alpha=0.5, color=color, label=f"model {side.upper()}")
            zeros.append(int((m == 0).sum()))
        if log_axis:
            log_scale(ax, "x")
        title = f"{name} ({sides['a'].size} units)"
        if any(zeros):
            title += f", zero: A {zeros[0]}, B {zeros[1]}"
        ax.set_title(title, fontsize=8)
        ax.set_xlabel("√E[z̃ᵢ²]", fontsize=8)
    axes[0].legend(fontsize=7)
    return save_figure(fig, path, FORMATS)


def plot_spectra(spectra: dict[str, dict[str, np.ndarray]], path: str | os.PathLike) -> list[Path]:
    """Per weight layer (``{name: {"a": (k,), "b": (k,)}}``), the singular values of W_A and
    W_B against their index (1-based), log-y (values clamped at 1e-12). Nothing is written
    (``[]`` returned) when ``spectra`` is empty; else saved at ``path`` (PNG, SVG beside)."""
    if not spectra:
        return []
    fig, axes = _panels(len(spectra))
    for ax, (name, sides) in zip(axes, spectra.items()):
        for side, color in (("a", "C0"), ("b", "C1")):
            sv = sides[side]
            ax.plot(
                np.arange(1, sv.size + 1),
                np.maximum(sv, 1e-12),
                color=color,
                label=f"W_{side.upper()}",
            )
        log_scale(ax, "y")
        ax.set_title(f"{name}", fontsize=8)
        ax.set_xlabel("index", fontsize=8)
        finish_axes(ax)
    axes[0].set_ylabel("singular value")
    axes[0].legend(fontsize=7)
    return save_figure(fig, path, FORMATS)
