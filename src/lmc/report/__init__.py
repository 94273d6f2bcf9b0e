"""Figures and a Markdown + HTML report from a results folder written by ``lmc.experiments``.

``lmc.report`` never trains or evaluates a model: it reads ``results.csv`` (required) and, when
present, ``study.json``, ``study.toml``, ``layers.csv``, ``moments.json``, ``spectra.json`` and
``table1.csv``, and writes ``report.md``, a self-contained ``report.html`` (figures embedded as
base64 PNG data URIs, each linking to its full-size file) and ``figures/*.png`` (print
resolution) with ``figures/*.svg`` beside them.

Plotting helpers for scripts and notebooks (no pyplot state; draw on any matplotlib ``Axes``):
``draw_path`` / ``draw_path_curves`` / ``path_figure`` (the path figure, also
``PathResult.plot``), ``new_figure``, ``finish_axes``, ``log_scale``, ``width_axis`` and
``save_figure`` (PNG + SVG). They live in ``lmc.metrics.figures`` (the path and the shared look,
below every package that draws) and ``lmc.report.style``.

Conventions (docs/science.md): θ(λ) = (1 − λ)θ_A + λθ_B, λ = 0 is A; accuracies are fractions in the
data and percent in figures and tables; accuracy barriers are shown in percentage points and
loss barriers in nats; a table's ± is the half-width of the mean's 95 % t-interval over pairs
(:mod:`lmc.stats`; the sample std, ddof = 1, is in the CSV files beside it).

    from lmc.report import write_report, table1
    paths = write_report("results/lewc-digits-mlp")   # {"report_md", "report_html", "figures"}
"""

from lmc.metrics.figures import draw_path, draw_path_curves, path_figure

from .kinds import write_report
from .results import Results, load_results
from .style import finish_axes, log_scale, new_figure, save_figure, width_axis
from .table import TABLE1_COLUMNS, table1

__all__ = [
    "TABLE1_COLUMNS",
    "Results",
    "draw_path",
    "draw_path_curves",
    "finish_axes",
    "load_results",
    "log_scale",
    "new_figure",
    "path_figure",
    "save_figure",
    "table1",
    "width_axis",
    "write_report",
]
