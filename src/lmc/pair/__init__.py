"""One pair of models end to end: align, evaluate the path, analyse, write the files.

``lmc interpolate``, ``lmc analyze`` and a sweep's merge job all go through :func:`run_pair`
with one :class:`PairSettings`, so the same settings give the same numbers wherever they run.

>>> settings = PairSettings(align="weight", path=PathSettings(lambdas=11, calibrate=True))
>>> result = run_pair(model_a, model_b, data, settings)     # A at λ = 0, B at λ = 1
>>> write_pair(result, "out/")                               # curve.csv, summary.json, path.png

Path convention: θ(λ) = (1 − λ)θ_A + λθ_B; definitions in ``docs/science.md``.

Stored runs (``lmc align``, ``lmc merge``): :func:`align_runs` stores B aligned onto A as a run
(:mod:`lmc.pair.aligned`), :func:`merge_runs` merges N runs into one (:mod:`lmc.pair.merged`).

Curves (``lmc curve``, a study's ``[merge] paths``): :func:`curve_pair` is the line and a
Bézier curve or chain between the same (aligned) endpoints, side by side (:mod:`lmc.pair.curve`).
"""

from lmc.metrics import PathSettings

from .aligned import AlignedRun, align_runs, align_weight_files
from .curve import (
    CurvePairResult,
    CurveResult,
    curve_pair,
    curve_summary,
    fit_pair_curve,
    write_curve_pair,
)
from .figures import draw_path, path_figure, plot_path
from .merged import MergedRun, merge_runs
from .output import curve_csv, path_summary, summary, write_pair
from .pipeline import PairResult, align_pair, alignment_examples, run_pair
from .settings import ALIGN_METHODS, BASELINES, AnalysisOptions, PairSettings

__all__ = [
    "ALIGN_METHODS",
    "AlignedRun",
    "MergedRun",
    "align_runs",
    "align_weight_files",
    "merge_runs",
    "BASELINES",
    "AnalysisOptions",
    "CurvePairResult",
    "CurveResult",
    "PairResult",
    "PairSettings",
    "PathSettings",
    "align_pair",
    "alignment_examples",
    "curve_csv",
    "curve_pair",
    "curve_summary",
    "draw_path",
    "fit_pair_curve",
    "path_figure",
    "path_summary",
    "plot_path",
    "run_pair",
    "summary",
    "write_curve_pair",
    "write_pair",
]
