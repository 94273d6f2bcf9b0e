"""The pair's path figure (``path.png``): loss (and calibrated loss) and accuracy against λ,
A (λ = 0) on the left.

The drawing lives in :mod:`lmc.metrics.figures` (below ``lmc.pair`` in the package order, and
shared with :meth:`lmc.metrics.PathResult.plot` and ``lmc.report``); this module only saves it.
No pyplot state is touched.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from lmc.metrics import PathResult
from lmc.metrics.figures import DPI, draw_path, path_figure, save_figure

__all__ = ["draw_path", "path_figure", "plot_path"]


def plot_path(
    path: str | os.PathLike,
    result: PathResult,
    baseline: PathResult | None = None,
    title: str = "",
    formats: Sequence[str] = ("png",),
) -> list[Path]:
    """Save :func:`path_figure` at ``path`` (atomically), once per format of ``formats``
    (``("png", "svg")``: ``path.png`` and ``path.svg`` beside it; PNG at the print resolution
    :data:`lmc.metrics.figures.DPI`). Returns the paths written."""
    return save_figure(path_figure(result, baseline, title), path, formats, DPI)
