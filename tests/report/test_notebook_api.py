"""The notebook API: ``PathResult.plot`` on a given axes, ``to_dataframe`` of a path and of a
layer analysis, the missing-pandas error, and one path drawing shared by metrics, pair and
report."""

from __future__ import annotations

import builtins
import math
import struct

import matplotlib
import numpy as np
import pytest
import torch
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

import lmc.pair
import lmc.report
from lmc.analysis import analyze
from lmc.analysis.pipeline import RECORD_KEYS
from lmc.config import LmcError
from lmc.metrics import PER_LAMBDA_KEYS, PathResult
from lmc.metrics import figures as metric_figures
from lmc.pair.figures import plot_path

LAMS = [0.0, 0.25, 0.5, 0.75, 1.0]


def make_path(calibrated: bool = True) -> PathResult:
    """A hand-made path: loss 1 + λ(1 − λ), accuracy 0.9 − λ(1 − λ), ..."""
    bump = [lam * (1 - lam) for lam in LAMS]
    cal = {
        "calibrated_loss": [0.8 + b / 2 for b in bump],
        "inverse_temperature": [1.0 + b for b in bump],
        "heldout_loss": [1.0 + b for b in bump],
        "ensemble_calibrated_loss": [0.7 for _ in bump],
        "ensemble_inverse_temperature": [math.nan, 1.0, 1.0, 1.0, 1.0],
    }
    return PathResult(
        lambdas=list(LAMS),
        loss=[1.0 + b for b in bump],
        accuracy=[0.9 - b for b in bump],
        logit_norm=[5.0 - b for b in bump],
        ensemble_loss=[0.9 for _ in bump],
        ensemble_accuracy=[0.95 for _ in bump],
        calibrate=calibrated,
        **(cal if calibrated else {}),
    )


def new_axes() -> Axes:
    fig = Figure()
    FigureCanvasAgg(fig)
    return fig.add_subplot()


def test_plot_draws_on_the_given_axes_one_line_per_curve():
    path = make_path()
    ax = new_axes()
    assert path.plot(ax) is ax
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["loss", "calibrated loss"]
    np.testing.assert_array_equal(lines[0].get_xdata(), LAMS)
    np.testing.assert_array_equal(lines[0].get_ydata(), path.loss)
    np.testing.assert_array_equal(lines[1].get_ydata(), path.calibrated_loss)
    assert ax.get_legend() is not None


def test_plot_options_choose_the_curves():
    path = make_path()
    assert len(path.plot(new_axes(), calibrated=False).get_lines()) == 1
    ax = path.plot(new_axes(), ensemble=True)
    assert [line.get_label() for line in ax.get_lines()] == [
        "loss",
        "calibrated loss",
        "ensemble loss",
        "ensemble calibrated loss",
    ]
    ax = path.plot(new_axes(), metric="accuracy")
    assert [line.get_label() for line in ax.get_lines()] == ["accuracy"]
    np.testing.assert_array_equal(ax.get_lines()[0].get_ydata(), path.accuracy)
    # an uncalibrated path has no calibrated curve, whatever `calibrated` says
    assert len(make_path(calibrated=False).plot(new_axes()).get_lines()) == 1


def test_plot_without_axes_leaves_pyplot_alone():
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    ax = make_path().plot()
    assert isinstance(ax, Axes) and isinstance(ax.figure, Figure)
    assert plt.get_fignums() == before


def test_plot_rejects_an_unknown_metric():
    with pytest.raises(LmcError, match="metric"):
        make_path().plot(new_axes(), metric="barrier")


def test_path_to_dataframe_has_one_row_per_lambda():
    path = make_path()
    frame = path.to_dataframe()
    assert list(frame.columns) == ["lambda", *PER_LAMBDA_KEYS]
    assert len(frame) == len(LAMS)
    assert list(frame["lambda"]) == LAMS
    for key in PER_LAMBDA_KEYS:
        assert frame[key].dtype == np.float64
        np.testing.assert_array_equal(frame[key].to_numpy(), np.array(getattr(path, key)))
    # not computed -> NaN columns
    plain = make_path(calibrated=False).to_dataframe()
    assert plain["calibrated_loss"].isna().all() and not plain["loss"].isna().any()


@pytest.fixture
def analysis_result():
    torch.manual_seed(0)

    def mlp():
        return torch.nn.Sequential(
            torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)
        ).eval()

    return analyze(mlp(), mlp(), torch.randn(40, 6), [0.25, 0.5], batch_size=16)


def test_analysis_to_dataframe_has_one_row_per_record(analysis_result):
    frame = analysis_result.to_dataframe()
    records = analysis_result.records
    assert list(frame.columns) == list(RECORD_KEYS)
    assert len(frame) == len(records) == 2 * 2  # 2 λ × (hidden layer, logits)
    assert list(frame["name"]) == [r["name"] for r in records]
    assert list(frame["lam"]) == [0.25, 0.25, 0.5, 0.5]
    np.testing.assert_allclose(frame["lewc_cosine"], [r["lewc_cosine"] for r in records])
    # a statistic that does not apply (None) is NaN
    logits = frame[frame["kind"] == "logits"]
    assert logits["weak_additivity_cosine"].isna().all()


def _hide_pandas(monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("No module named 'pandas'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)


def test_missing_pandas_is_an_error_naming_the_extra(monkeypatch, analysis_result):
    _hide_pandas(monkeypatch)
    for call in (make_path().to_dataframe, analysis_result.to_dataframe):
        with pytest.raises(LmcError, match=r"pip install 'lmc\[pandas\]'"):
            call()
    # plotting does not need pandas
    assert isinstance(make_path().plot(new_axes()), Axes)


def test_one_path_drawing_everywhere():
    assert lmc.pair.draw_path is metric_figures.draw_path is lmc.report.draw_path
    assert lmc.pair.path_figure is metric_figures.path_figure is lmc.report.path_figure
    fig = lmc.report.path_figure(make_path(), make_path(calibrated=False), title="t")
    ax_loss, ax_acc = fig.axes
    assert [line.get_label() for line in ax_loss.get_lines()] == [
        "loss",
        "calibrated loss",
        "loss (random direction)",
    ]
    assert [line.get_label() for line in ax_acc.get_lines()] == [
        "accuracy",
        "accuracy (random direction)",
    ]


def _png_width(data: bytes) -> int:
    return struct.unpack(">II", data[16:24])[0]


def test_plot_path_saves_print_resolution_png_and_svg_beside_it(tmp_path):
    written = plot_path(tmp_path / "path.png", make_path(), formats=("png", "svg"))
    assert [p.name for p in written] == ["path.png", "path.svg"]
    png = (tmp_path / "path.png").read_bytes()
    inches = lmc.report.path_figure(make_path()).get_size_inches()[0]
    assert _png_width(png) == round(inches * metric_figures.DPI) and metric_figures.DPI >= 200
    assert b"<svg" in (tmp_path / "path.svg").read_bytes()[:2000]
    only_png = plot_path(tmp_path / "other" / "path.png", make_path())
    assert [p.name for p in only_png] == ["path.png"]
    with pytest.raises(LmcError, match="formats"):
        plot_path(tmp_path / "x.png", make_path(), formats=("gif",))
