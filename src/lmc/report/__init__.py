"""Figures and a Markdown + HTML report from a results folder written by ``lmc.experiments``.

``lmc.report`` never trains or evaluates a model: it reads ``results.csv`` (required) and, when
present, ``study.json``, ``study.toml``, ``layers.csv``, ``moments.json``, ``spectra.json`` and
``table1.csv``, and writes ``report.md``, a self-contained ``report.html`` (figures embedded as
base64 PNG data URIs) and ``figures/*.png``.

Conventions (docs/science.md): θ(λ) = (1 − λ)θ_A + λθ_B, λ = 0 is A; accuracies are fractions in the
data and percent in figures and tables; accuracy barriers are shown in percentage points and
loss barriers in nats; mean ± std is over pairs with the sample std (ddof = 1).

    from lmc.report import write_report, table1
    paths = write_report("results/lewc-digits-mlp")   # {"report_md", "report_html", "figures"}
"""

from .build import write_report
from .results import Results, load_results
from .table import TABLE1_COLUMNS, table1

__all__ = ["TABLE1_COLUMNS", "Results", "load_results", "table1", "write_report"]
