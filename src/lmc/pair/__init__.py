"""One pair of models end to end: align, evaluate the path, analyse, write the files.

``lmc interpolate``, ``lmc analyze`` and a sweep's merge job all go through :func:`run_pair`
with one :class:`PairSettings`, so the same settings give the same numbers wherever they run.

>>> settings = PairSettings(align="weight", path=PathSettings(lambdas=11, calibrate=True))
>>> result = run_pair(model_a, model_b, data, settings)     # A at λ = 0, B at λ = 1
>>> write_pair(result, "out/")                               # curve.csv, summary.json, path.png

Path convention: θ(λ) = (1 − λ)θ_A + λθ_B; definitions in ``docs/science.md``.
"""

from lmc.metrics import PathSettings

from .figures import draw_path, path_figure, plot_path
from .output import curve_csv, path_summary, summary, write_pair
from .pipeline import PairResult, align_pair, alignment_examples, run_pair
from .settings import ALIGN_METHODS, BASELINES, AnalysisOptions, PairSettings

__all__ = [
    "ALIGN_METHODS",
    "BASELINES",
    "AnalysisOptions",
    "PairResult",
    "PairSettings",
    "PathSettings",
    "align_pair",
    "alignment_examples",
    "curve_csv",
    "draw_path",
    "path_figure",
    "path_summary",
    "plot_path",
    "run_pair",
    "summary",
    "write_pair",
]
