"""One look for every figure: colours, markers, labels, and the single rendering helper.

Widths use a graduated colour map (viridis, dark = narrow, light = wide); layers use plasma
(dark = input side, light = logits); methods use the Okabe–Ito colour-blind-safe palette with a
distinct marker each. Figures are built with the object API (no pyplot state) on the Agg canvas.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import (
    FixedLocator,
    FuncFormatter,
    LogLocator,
    NullFormatter,
    NullLocator,
)

DPI = 110


# method -> (colour, marker, label); Okabe–Ito palette.
METHOD_STYLE = {
    "none": ("#0072B2", "o", "no permutation"),
    "weight": ("#D55E00", "s", "weight matching"),
    "activation": ("#009E73", "^", "activation matching"),
    "ste": ("#CC79A7", "D", "straight-through estimator"),
    "random": ("#E69F00", "v", "random permutation"),
}
_EXTRA = (("#56B4E9", "P"), ("#F0E442", "X"), ("#000000", "*"))
MODEL_COLOURS = {"a": "#0072B2", "b": "#E69F00"}
REFERENCE = "#555555"


def method_style(method: str) -> tuple[str, str, str]:
    """(colour, marker, label) of a merge method."""
    if method in METHOD_STYLE:
        return METHOD_STYLE[method]
    colour, marker = _EXTRA[sum(map(ord, method)) % len(_EXTRA)]
    return colour, marker, method


def width_colours(widths: Sequence[float]) -> dict[float, tuple]:
    """Graduated viridis colours from the narrowest (dark) to the widest (light) width."""
    cmap = colormaps["viridis"]
    n = len(widths)
    return {w: cmap(0.88 * i / max(n - 1, 1)) for i, w in enumerate(sorted(widths))}


def layer_colours(layers: Sequence[int]) -> dict[int, tuple]:
    cmap = colormaps["plasma"]
    n = len(layers)
    return {v: cmap(0.82 * i / max(n - 1, 1)) for i, v in enumerate(sorted(layers))}


def fmt_width(width: float) -> str:
    return f"{int(width)}" if float(width).is_integer() else f"{width:g}"


def fmt_wd(wd: float) -> str:
    return f"{wd:g}"


def new_figure(
    rows: int, cols: int, *, panel: tuple[float, float] = (3.7, 2.9), **subplot_kw
) -> tuple[Figure, np.ndarray]:
    """A figure of rows × cols panels (constrained layout), axes as a 2-D array."""
    fig = Figure(figsize=(panel[0] * cols, panel[1] * rows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False, **subplot_kw)
    return fig, axes


def render(fig: Figure) -> bytes:
    """PNG bytes of ``fig`` at ``DPI``; the figure is cleared afterwards to free memory."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    fig.clear()
    return buffer.getvalue()


def width_axis(ax, widths: Sequence[float], label: str) -> None:
    """Log-x axis with a tick at every width."""
    ax.set_xscale("log")
    ws = sorted(widths)
    ax.xaxis.set_major_locator(FixedLocator(ws))
    ax.set_xticklabels([fmt_width(w) for w in ws])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    if len(ws) > 1:
        span = math.log(ws[-1] / ws[0])
        pad = math.exp(0.06 * span)
        ax.set_xlim(ws[0] / pad, ws[-1] * pad)
    ax.set_xlabel(label)


def log_scale(ax, axis: str = "x") -> None:
    """Log scale for an axis whose data are already plotted. Over two decades or more, only
    the decades are ticked (minor ticks are slow to lay out and add nothing); over a narrower
    range, ticks at 1, 2 and 5 times each decade, labelled as plain numbers."""
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    target = ax.xaxis if axis == "x" else ax.yaxis
    lo, hi = ax.dataLim.intervalx if axis == "x" else ax.dataLim.intervaly
    if lo > 0 and math.isfinite(lo) and math.isfinite(hi) and hi / lo >= 100:
        target.set_minor_locator(NullLocator())
        target.set_minor_formatter(NullFormatter())
        return
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    target.set_major_locator(LogLocator(base=10))
    target.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
    target.set_major_formatter(plain)
    target.set_minor_formatter(plain)


def no_data(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color=REFERENCE)
    ax.set_xticks([])
    ax.set_yticks([])


def finish_axes(ax) -> None:
    ax.grid(True, color="#dddddd", lw=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
