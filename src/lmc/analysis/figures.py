"""Figures of a layerwise analysis (matplotlib, Agg; no pyplot state is touched).

- ``plot_cosines``: per-layer cosines against depth ℓ, one panel per λ: LEWC, LLFC, endpoint,
  weak additivity and reciprocal cosine, with Theorem 5.4's Gaussian limit for reference.
- ``plot_moments``: per layer, histograms of the per-unit root second moments √E[z~_i²] of A
  and B overlaid (log-spaced bins; exactly-zero units are counted in the panel title).
- ``plot_spectra``: per weight layer, the singular values of W_A and W_B (log scale).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from lmc.store import atomic_path

from .theory import GAUSSIAN_RELU_LIMIT

COSINES = (
    ("lewc_cosine", "LEWC"),
    ("llfc_cosine", "LLFC"),
    ("endpoint_cosine", "endpoints A vs B"),
    ("weak_additivity_cosine", "weak additivity"),
    ("reciprocal_cosine", "reciprocal cos(W_A z_C, W_A z_A)"),
)


def _grid(count: int, size: tuple[float, float] = (3.2, 2.6)) -> tuple[Figure, list]:
    cols = min(count, 4)
    rows = math.ceil(count / cols)
    fig = Figure(figsize=(size[0] * cols, size[1] * rows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[count:]:
        ax.set_visible(False)
    return fig, axes[:count]


def _save(fig: Figure, path: str | os.PathLike) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)


def _value(v: Any) -> float:
    return math.nan if v is None else float(v)


def plot_cosines(records: Sequence[dict], path: str | os.PathLike) -> None:
    lams = list(dict.fromkeys(r["lam"] for r in records))
    fig, axes = _grid(len(lams), (4.8, 3.4))
    for ax, lam in zip(axes, lams):
        rows = [r for r in records if r["lam"] == lam]
        layers = [r["layer"] for r in rows]
        for key, label in COSINES:
            values = [_value(r[key]) for r in rows]
            if not all(math.isnan(v) for v in values):
                ax.plot(layers, values, marker="o", label=label)
        ax.axhline(GAUSSIAN_RELU_LIMIT, color="grey", ls="--", lw=0.8, label="Thm 5.4 limit")
        ax.set_xticks(layers, [r["name"] for r in rows], rotation=45, ha="right", fontsize=7)
        ax.set_title(f"λ = {lam:g}  (θ(λ) = (1−λ)θ_A + λθ_B)", fontsize=9)
        ax.set_ylabel("cosine")
        ax.set_ylim(min(0.0, ax.get_ylim()[0]), 1.02)
    axes[0].legend(fontsize=7, loc="lower left")
    _save(fig, path)


def plot_moments(moments: dict[str, dict[str, np.ndarray]], path: str | os.PathLike) -> None:
    fig, axes = _grid(len(moments))
    for ax, (name, sides) in zip(axes, moments.items()):
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
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
        title = f"{name} ({sides['a'].size} units)"
        if any(zeros):
            title += f", zero: A {zeros[0]}, B {zeros[1]}"
        ax.set_title(title, fontsize=8)
        ax.set_xlabel("√E[z̃ᵢ²]", fontsize=8)
    axes[0].legend(fontsize=7)
    _save(fig, path)


def plot_spectra(spectra: dict[str, dict[str, np.ndarray]], path: str | os.PathLike) -> None:
    if not spectra:
        return
    fig, axes = _grid(len(spectra))
    for ax, (name, sides) in zip(axes, spectra.items()):
        for side, color in (("a", "C0"), ("b", "C1")):
            sv = sides[side]
            ax.plot(
                np.arange(1, sv.size + 1),
                np.maximum(sv, 1e-12),
                color=color,
                label=f"W_{side.upper()}",
            )
        ax.set_yscale("log")
        ax.set_title(f"{name}", fontsize=8)
        ax.set_xlabel("index", fontsize=8)
    axes[0].set_ylabel("singular value")
    axes[0].legend(fontsize=7)
    _save(fig, path)
