"""The report's stitching section (``stitch.csv``; LLFC App. B.4).

For each (width, weight decay, method), the test error of the model that runs A's first ℓ
layers and B's (aligned by the method) others, ℓ = 0 (B alone) .. L (A alone), mean over
pairs: a table of the worst interior layer against the endpoints, and a figure of the error
against ℓ. Errors are fractions in the data, percent here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .document import Block, Heading, Para, Table
from .figures import Plot
from .results import Results, mean_std, method_sort_key
from .style import REFERENCE, finish_axes, fmt_wd, fmt_width, method_style, new_figure, render

#: Most panels (widths) one stitching figure shows; a wider grid shows its extremes.
MAX_PANELS = 4


def _cells(res: Results) -> dict[tuple[float, float, str], list[dict[str, Any]]]:
    cells: dict[tuple[float, float, str], list[dict[str, Any]]] = {}
    for row in res.stitch or []:
        cells.setdefault((row["weight_decay"], row["width"], row["method"]), []).append(row)
    return cells


def _by_layer(rows: list[dict[str, Any]], column: str = "error") -> dict[int, tuple[float, float]]:
    """layer -> (mean, std) of ``column`` over pairs."""
    layers: dict[int, list[float]] = {}
    for row in rows:
        layers.setdefault(int(row["layer"]), []).append(row[column])
    return {layer: mean_std(values)[:2] for layer, values in sorted(layers.items())}


def summary_rows(res: Results) -> list[dict[str, Any]]:
    """Per (weight decay, width, method): ``L``, the endpoints' mean error, the worst interior
    layer's mean error (ℓ = 1..L−1) and that layer; ``pairs`` counted."""
    out = []
    for (wd, width, method), rows in sorted(
        _cells(res).items(), key=lambda kv: (-kv[0][0], kv[0][1], method_sort_key(kv[0][2]))
    ):
        means = _by_layer(rows)
        total = max(means)
        interior = {layer: m for layer, (m, _) in means.items() if 0 < layer < total}
        worst = max(interior, key=interior.get) if interior else None
        out.append(
            {
                "weight_decay": wd,
                "width": width,
                "method": method,
                "layers": total,
                "pairs": len({r["pair"] for r in rows}),
                "error_a": mean_std(r["error_a"] for r in rows if r["layer"] == 0)[0],
                "error_b": mean_std(r["error_b"] for r in rows if r["layer"] == 0)[0],
                "worst_layer": worst,
                "worst_error": interior[worst] if worst is not None else math.nan,
            }
        )
    return out


def _pct(value: float) -> str:
    return f"{100 * value:.2f}" if math.isfinite(value) else "–"


def stitch_table(res: Results) -> Table:
    rows = [
        [
            fmt_width(r["width"]),
            fmt_wd(r["weight_decay"]),
            method_style(r["method"])[2],
            _pct(r["error_a"]),
            _pct(r["error_b"]),
            _pct(r["worst_error"]),
            "–" if r["worst_layer"] is None else f"{r['worst_layer']} of {r['layers']}",
            str(r["pairs"]),
        ]
        for r in summary_rows(res)
    ]
    return Table(
        [
            "width",
            "weight decay",
            "B aligned by",
            "error A (%)",
            "error B (%)",
            "worst stitched error (%)",
            "at ℓ",
            "pairs",
        ],  # fmt: skip
        rows,
        caption="Test error of A's first ℓ layers followed by B's, means over pairs; the worst "
        "interior ℓ (1..L−1) against the endpoints (ℓ = L is A, ℓ = 0 is B). Values from "
        "`stitch.csv`.",
        align=["r", "r", "l", "r", "r", "r", "r", "r"],
    )


def _panel_widths(widths: list[float]) -> list[float]:
    if len(widths) <= MAX_PANELS:
        return widths
    step = (len(widths) - 1) / (MAX_PANELS - 1)
    return [widths[round(i * step)] for i in range(MAX_PANELS)]


def stitch_figure(res: Results, wd: float) -> Plot | None:
    """Stitched error against ℓ at weight decay ``wd``: one panel per width, one line per
    method (mean ± std over pairs); ``None`` when ``stitch.csv`` has nothing at ``wd``."""
    cells = {k: v for k, v in _cells(res).items() if k[0] == wd}
    if not cells:
        return None
    widths = _panel_widths(sorted({k[1] for k in cells}))
    fig, axes = new_figure(1, len(widths), panel=(4.0, 3.3), sharey=True)
    for ax, width in zip(axes[0], widths):
        methods = sorted({k[2] for k in cells if k[1] == width}, key=method_sort_key)
        total = 0
        for method in methods:
            means = _by_layer(cells[(wd, width, method)])
            layers = np.array(list(means))
            mean = np.array([100 * m for m, _ in means.values()])
            std = np.array([100 * s for _, s in means.values()])
            colour, marker, label = method_style(method)
            ax.plot(layers, mean, color=colour, marker=marker, ms=4, lw=1.5, label=label)
            if np.any(std > 0):
                ax.fill_between(layers, mean - std, mean + std, color=colour, alpha=0.15, lw=0)
            total = max(total, int(layers.max()))
        rows = [r for k, v in cells.items() if k[1] == width for r in v if r["layer"] == 0]
        endpoint = 100 * mean_std([(r["error_a"] + r["error_b"]) / 2 for r in rows])[0]
        ax.axhline(endpoint, color=REFERENCE, ls=":", lw=1.2, label="mean endpoint error")
        ax.set_xticks(
            range(total + 1), ["0\nB"] + [str(i) for i in range(1, total)] + [f"{total}\nA"]
        )
        ax.set_xlabel("ℓ: layers taken from A")
        ax.set_title(f"width {fmt_width(width)}", fontsize=9.5)
        finish_axes(ax)
    axes[0][0].set_ylabel("test error (%)")
    axes[0][-1].legend(frameon=False, fontsize=7.5)
    fig.suptitle(f"Stitching without an adapter\n{res.dataset} · {res.model} · "
                 f"weight decay {fmt_wd(wd)}", fontsize=10)  # fmt: skip
    shown = (
        ""
        if len(widths) == len(sorted({k[1] for k in cells}))
        else (f" (widths {', '.join(fmt_width(w) for w in widths)} of the grid)")
    )
    caption = (
        f"Test error of the model that runs A's layers 1..ℓ and B's layers ℓ+1..L (B aligned "
        f"to A by each method), mean over pairs with ± std shaded{shown}; ℓ = 0 is B, ℓ = L is "
        "A, the dotted line the endpoints' mean error. LLFC (App. B.4) finds stitched "
        "spawned or permuted models close to the endpoints at every layer."
    )
    return Plot(f"stitching_wd{fmt_wd(wd)}", "Stitching", caption, render(fig))


def stitch_blocks(res: Results, figures: Any) -> list[Block]:
    """The section, or nothing without ``stitch.csv``. ``figures``: the report's figure
    writer (``block(plot)`` -> an image block)."""
    if not res.stitch:
        return []
    blocks: list[Block] = [
        Heading(2, "Stitching"),
        Para(
            "Layer ℓ of A followed by layer ℓ + 1 of B with no adapter between them (LLFC "
            "App. B.4): a stitched error close to the endpoints' at every ℓ means A's and "
            "B's features are interchangeable there."
        ),
        stitch_table(res),
    ]
    for wd in res.weight_decays:
        plot = stitch_figure(res, wd)
        if plot is not None:
            blocks.append(figures.block(plot))
    return blocks
