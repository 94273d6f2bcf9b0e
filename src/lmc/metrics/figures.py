"""Figures without pyplot state: the shared look of every lmc figure and the path figure.

Layering (docs/design.md: config -> ... -> metrics -> analysis -> pair -> experiments -> report;
each package imports only from those before it). :meth:`lmc.metrics.PathResult.plot` draws
the path, so the path drawing and the style it uses live here, in ``lmc.metrics``, the
lowest package that draws; ``lmc.pair`` (the verbs' ``path.png``) and ``lmc.report`` (its
``style`` module and public plotting helpers) call them and hold no drawing code of their own
for the path. This module is imported lazily (``PathResult.plot`` imports it on first use), so
``import lmc.metrics`` does not import matplotlib.

Figures are built with matplotlib's object API on the Agg canvas (``Figure`` +
``FigureCanvasAgg``): no pyplot state is read or changed, so drawing is safe in threads,
scripts and notebooks alike (pass your own ``Axes`` to draw into a pyplot or notebook figure).

Conventions: θ(λ) = (1 − λ)θ_A + λθ_B, λ = 0 is A and is drawn at the left; losses are mean
cross-entropies in nats, accuracies fractions in [0, 1] (this module plots them as given).
Saved figures are PNG at :data:`DPI` (print resolution) and, with ``formats``, SVG beside it.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

from lmc.config import LmcError
from lmc.store import atomic_path

if TYPE_CHECKING:  # pragma: no cover
    from .result import PathResult

#: Resolution of saved PNGs (dots per inch): print quality.
DPI = 200
#: Pixels per inch a figure is shown at on screen (a report shows a w-inch figure w * 110 px
#: wide, then a click opens the full-size file).
SCREEN_DPI = 110
#: The formats :func:`save_figure` writes by default.
FORMATS = ("png", "svg")

# The path's curves, in the Okabe–Ito colour-blind-safe palette the report uses.
PATH_COLOURS = {
    "loss": "#0072B2",
    "calibrated_loss": "#D55E00",
    "accuracy": "#009E73",
    "ensemble": "#555555",
}
#: metric -> (per-λ key, calibrated key or None, ensemble key, ensemble calibrated key, y label)
PATH_METRICS = {
    "loss": (
        "loss",
        "calibrated_loss",
        "ensemble_loss",
        "ensemble_calibrated_loss",
        "cross-entropy (nats)",
    ),
    "accuracy": ("accuracy", None, "ensemble_accuracy", None, "accuracy (fraction)"),
}
LAMBDA_TICKS = ([0.0, 0.25, 0.5, 0.75, 1.0], ["0\nA", "0.25", "0.5", "0.75", "1\nB"])


# ---- the shared look ------------------------------------------------------------------------
def new_figure(
    rows: int = 1, cols: int = 1, *, panel: tuple[float, float] = (3.7, 2.9), **subplot_kw: Any
) -> tuple[Figure, np.ndarray]:
    """A figure of ``rows`` × ``cols`` panels of ``panel`` inches each (constrained layout, on
    the Agg canvas), its axes as a 2-D array."""
    fig = Figure(figsize=(panel[0] * cols, panel[1] * rows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False, **subplot_kw)
    return fig, axes


def finish_axes(ax: Axes) -> None:
    """The common finish: a light grid behind the data, no top and right spines."""
    ax.grid(True, color="#dddddd", lw=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def figure_bytes(fig: Figure, fmt: str = "png", dpi: int = DPI) -> bytes:
    """``fig`` encoded as ``fmt`` (``png``, ``svg`` or ``pdf``; PNG at ``dpi``); SVG and PDF
    carry no date, so the same figure gives the same bytes."""
    buffer = io.BytesIO()
    metadata = {"Date": None} if fmt in ("svg", "pdf") else None
    fig.savefig(buffer, format=fmt, dpi=dpi, metadata=metadata)
    return buffer.getvalue()


def figure_formats(fig: Figure, formats: Sequence[str], dpi: int = DPI) -> list[bytes]:
    """``fig`` encoded once per format (:func:`figure_bytes`). The figure's layout engine
    (constrained layout, the costliest part of a draw) runs for the first format only; the
    others reuse the axes' positions it set, so every format shows the same layout."""
    out = []
    engine = fig.get_layout_engine()
    try:
        for i, fmt in enumerate(formats):
            if i == 1 and engine is not None:
                fig.set_layout_engine("none")
            out.append(figure_bytes(fig, fmt, dpi))
    finally:
        if engine is not None and fig.get_layout_engine() is not engine:
            fig.set_layout_engine(engine)
    return out


def save_figure(
    fig: Figure,
    path: str | os.PathLike,
    formats: Sequence[str] = FORMATS,
    dpi: int = DPI,
) -> list[Path]:
    """Save ``fig`` once per format beside each other, ``path`` with its suffix replaced
    (``out/path.png`` -> ``out/path.png``, ``out/path.svg``), each atomically; returns the
    paths written."""
    unknown = [f for f in formats if f not in ("png", "svg", "pdf")]
    if unknown or not formats:
        raise LmcError(f"formats must be some of png, svg, pdf, got {list(formats)}")
    written = []
    for fmt, data in zip(formats, figure_formats(fig, formats, dpi), strict=True):
        target = Path(path).with_suffix(f".{fmt}")
        with atomic_path(target) as tmp:
            Path(tmp).write_bytes(data)
        written.append(target)
    return written


def log_scale(ax: Axes, axis: str = "x", *, limits_of: Sequence | None = None) -> None:
    """Log scale for an axis whose data are already plotted, with few, readable ticks.

    The range is the data's (over ``limits_of``, the axes that share this one, when given).
    Two decades or more: ticks at decades only, at most 6 of them (every other decade, ...),
    labelled as plain numbers between 1e-3 and 1e4 and as powers of ten outside; no minor
    ticks. A narrower range: ticks at 1, 2 and 5 times each decade (every integer multiple
    when that gives fewer than 3), labelled as plain numbers."""
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    target = ax.xaxis if axis == "x" else ax.yaxis
    lo, hi = _positive_range(limits_of or [ax], axis)
    target.set_minor_locator(NullLocator())
    target.set_minor_formatter(NullFormatter())
    if not (0 < lo < hi):
        return
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    if math.log10(hi / lo) >= 2:
        decades = list(range(first, last + 1))
        step = max(1, math.ceil(len(decades) / 6))
        ticks = [10.0**k for k in decades[::step]]
        target.set_major_locator(FixedLocator(ticks))
        target.set_major_formatter(FuncFormatter(_decade_label))
        return
    for multiples in ((1, 2, 5), tuple(range(1, 10))):
        ticks = [
            m * 10.0**k
            for k in range(first, last + 1)
            for m in multiples
            if lo <= m * 10.0**k <= hi
        ]
        if len(ticks) >= 3:
            break
    if len(ticks) > 6:
        ticks = ticks[:: math.ceil(len(ticks) / 6)]
    target.set_major_locator(FixedLocator(ticks))
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def _positive_range(axes: Sequence, axis: str) -> tuple[float, float]:
    """The smallest and largest positive finite data value of ``axes`` along ``axis``
    (line data and histogram edges included), or (nan, nan) when there is none."""
    values: list[float] = []
    for a in axes:
        lo, hi = a.dataLim.intervalx if axis == "x" else a.dataLim.intervaly
        values += [v for v in (lo, hi) if math.isfinite(v) and v > 0]
        for line in a.get_lines():
            data = np.asarray(line.get_xdata() if axis == "x" else line.get_ydata(), dtype=float)
            data = data[np.isfinite(data) & (data > 0)]
            if data.size:
                values += [float(data.min()), float(data.max())]
    return (min(values), max(values)) if values else (math.nan, math.nan)


def _decade_label(value: float, _pos: int) -> str:
    if 1e-3 <= value <= 1e4:
        return f"{value:g}"
    return f"$10^{{{round(math.log10(value))}}}$"


def lambda_axis(ax: Axes, label: str = "λ   (θ(λ) = (1 − λ)θ_A + λθ_B)") -> None:
    """The λ axis: 0 (A) at the left, 1 (B) at the right, ticks every quarter."""
    ax.set_xticks(*LAMBDA_TICKS)
    ax.set_xlim(-0.02, 1.02)
    ax.set_xlabel(label)


# ---- the path -------------------------------------------------------------------------------
def draw_path_curves(
    ax: Axes,
    result: PathResult,
    metric: str = "loss",
    *,
    calibrated: bool = True,
    ensemble: bool = False,
    linestyle: str = "-",
    suffix: str = "",
    endpoints: bool = True,
) -> list:
    """Draw one metric of ``result`` against λ on ``ax``; returns the lines drawn.

    ``metric``: ``loss`` (the loss, and with ``calibrated`` the calibrated loss when the path
    was calibrated) or ``accuracy``. ``ensemble``: also the ensemble (1 − λ)f_A + λf_B's curve
    (dotted, grey; calibrated too when drawn). One line per curve; ``endpoints`` marks A and B
    (λ = 0, 1) with black dots (a scatter, not a line). ``suffix`` is appended to each label.
    """
    if metric not in PATH_METRICS:
        raise LmcError(f"metric must be one of {', '.join(PATH_METRICS)}, got {metric!r}")
    key, cal_key, ens_key, ens_cal_key, ylabel = PATH_METRICS[metric]
    lam = result.lambdas
    if getattr(result, key) is None:  # a task without this metric (e.g. no accuracy)
        ax.set_ylabel(f"{ylabel} (none for this task)")
        return []
    curves = [(key, PATH_COLOURS[key], linestyle, key)]
    if calibrated and cal_key and getattr(result, cal_key) is not None:
        curves.append((cal_key, PATH_COLOURS[cal_key], linestyle, cal_key))
    if ensemble and getattr(result, ens_key) is not None:
        curves.append((ens_key, PATH_COLOURS["ensemble"], ":", ens_key))
        if calibrated and ens_cal_key and getattr(result, ens_cal_key) is not None:
            curves.append((ens_cal_key, PATH_COLOURS["calibrated_loss"], ":", ens_cal_key))
    lines = []
    for attr, colour, style, label in curves:
        values = np.array(getattr(result, attr), dtype=float)
        (line,) = ax.plot(
            lam, values, linestyle=style, color=colour, marker=".",
            label=label.replace("_", " ") + suffix,
        )  # fmt: skip
        lines.append(line)
    if endpoints and lam:
        values = getattr(result, key)
        ax.scatter([lam[0], lam[-1]], [values[0], values[-1]], s=40, color="k", zorder=3)
    lambda_axis(ax)
    ax.set_ylabel(ylabel)
    finish_axes(ax)
    return lines


def draw_path(
    axes: Sequence[Axes],
    result: PathResult,
    baseline: PathResult | None = None,
    *,
    calibrated: bool = True,
) -> None:
    """Draw ``result`` on two axes ``(loss, accuracy)``: loss and calibrated loss on the first,
    accuracy on the second; a random-direction ``baseline``, when given, dashed in the same
    colours (no endpoint dots)."""
    ax_loss, ax_acc = axes
    for ax, metric in ((ax_loss, "loss"), (ax_acc, "accuracy")):
        lines = draw_path_curves(ax, result, metric, calibrated=calibrated)
        if baseline is not None:
            lines += draw_path_curves(
                ax, baseline, metric, calibrated=calibrated, linestyle="--",
                suffix=" (random direction)", endpoints=False,
            )  # fmt: skip
        if lines:
            ax.legend(fontsize=8)


def path_figure(result: PathResult, baseline: PathResult | None = None, title: str = "") -> Figure:
    """A two-panel figure of the path (:func:`draw_path`), 10 × 4 inches."""
    fig, axes = new_figure(1, 2, panel=(5.0, 4.0))
    draw_path(axes[0], result, baseline)
    if title:
        fig.suptitle(title, fontsize=9)
    return fig
