"""One look for every figure: colours, markers, labels, and the single rendering helper.

Widths use a graduated colour map (viridis, dark = narrow, light = wide); layers use plasma
(dark = input side, light = logits); methods use the Okabe–Ito colour-blind-safe palette with a
distinct marker each, as their records give them (``AlignmentMethod.style`` and ``label``,
:mod:`lmc.perm.methods`: ``METHOD_STYLE`` is generated from the records). Figures are built with
the object API (no pyplot state) on the Agg canvas.

The figure primitives every lmc figure shares (``new_figure``, ``finish_axes``, the print
resolution ``DPI``, ``save_figure``, the log axis ``log_scale``) live in
:mod:`lmc.metrics.figures`, the lowest package that draws (``PathResult.plot`` uses them), and
are re-exported here; ``render`` encodes a report figure as PNG (at ``DPI``) and SVG.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

from lmc.metrics.figures import (  # noqa: F401  (the shared look, re-exported for the figures)
    DPI,
    SCREEN_DPI,
    figure_formats,
    finish_axes,
    log_scale,
    new_figure,
    save_figure,
)
from lmc.perm.methods import all_methods

#: The spare (colour, marker) pairs of a method whose record gives no style (or that is not a
#: registered method), picked from its name.
_EXTRA = (("#F0E442", "X"), ("#000000", "*"), ("#999999", "h"))
MODEL_COLOURS = {"a": "#0072B2", "b": "#E69F00"}
REFERENCE = "#555555"


def method_styles() -> dict[str, tuple[str, str, str]]:
    """method -> (colour, marker, label) of every registered alignment method whose record gives
    a style (``AlignmentMethod.style`` and ``label``, :mod:`lmc.perm.methods`; the built-in ones
    in the Okabe–Ito palette), in registration order."""
    return {
        m.name: (m.style.colour, m.style.marker, m.label)
        for m in all_methods()
        if m.style is not None
    }


def __getattr__(name: str) -> Any:
    # ``METHOD_STYLE``: :func:`method_styles`, read from the records at each access, so that a
    # method registered after this module was imported is drawn in its style
    if name == "METHOD_STYLE":
        return method_styles()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def method_style(method: str) -> tuple[str, str, str]:
    """(colour, marker, label) of a merge method: its record's style and label, else a spare
    style picked from the name (and the record's label, or the name)."""
    styles = method_styles()
    if method in styles:
        return styles[method]
    colour, marker = _EXTRA[sum(map(ord, method)) % len(_EXTRA)]
    methods = {m.name: m for m in all_methods()}
    return colour, marker, methods[method].label if method in methods else method


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


@dataclass(frozen=True)
class Rendered:
    """A figure encoded for the report: PNG at ``DPI`` (print resolution), SVG, and its size in
    inches (the report shows it ``inches * SCREEN_DPI`` pixels wide)."""

    png: bytes
    svg: bytes
    size: tuple[float, float]


def render(fig: Figure) -> Rendered:
    """``fig`` as PNG (at ``DPI``) and SVG; the figure is cleared afterwards to free memory."""
    size = tuple(float(v) for v in fig.get_size_inches())
    png, svg = figure_formats(fig, ("png", "svg"), DPI)
    out = Rendered(png, svg, size)
    fig.clear()
    return out


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


def no_data(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color=REFERENCE)
    ax.set_xticks([])
    ax.set_yticks([])
