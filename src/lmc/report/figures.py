"""The report's figures. Each function takes the parsed ``Results`` (and a weight decay) and
returns a ``Plot`` (a file stem, a title, a caption, and the figure as PNG at print resolution
and as SVG) or a ``Skip`` saying why the
figure could not be drawn (missing inputs never raise).

Conventions: θ(λ) = (1 − λ)θ_A + λθ_B (λ = 0 is A, plotted at the left); accuracies are shown
in percent, accuracy barriers in percentage points, losses in nats; error bars are the 95 %
t-interval of the mean over pairs (:mod:`lmc.stats`; none with one pair), the values per pair
those of :func:`pair_values`. Widths are labelled with what they count, as the model's
registry entry says (``lmc.models.ModelEntry.width_label``: hidden units per layer, channel
multiplier, embedding dimension).
Undefined calibrations (a β on the bound of its search) are NaN in ``Results.rows``, so no
figure's mean includes one; the captions of the calibrated figures say how many were left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from lmc.analysis.layer_metrics import report_panels
from lmc.metrics import BARRIER_BY_KEY
from lmc.metrics.barriers import path_kind_of
from lmc.stats import summarize

from .results import Results, is_close, mean_std, number
from .style import (
    MODEL_COLOURS,
    REFERENCE,
    Rendered,
    finish_axes,
    fmt_wd,
    fmt_width,
    layer_colours,
    log_scale,
    method_style,
    new_figure,
    no_data,
    render,
    width_axis,
    width_colours,
)

MAX_LAYER_PANELS = 6


@dataclass
class Plot:
    name: str  # file stem under figures/
    title: str
    caption: str
    rendered: Rendered  # PNG at print resolution, SVG, size in inches

    @property
    def png(self) -> bytes:
        return self.rendered.png

    @property
    def svg(self) -> bytes:
        return self.rendered.svg


@dataclass
class Skip:
    title: str
    reason: str


# ---- shared pieces --------------------------------------------------------------------------
def width_label(res: Results) -> str:
    """The width axis' label: what a width counts, from the model's registry entry
    (:attr:`Results.width_label`; just "width" for an unknown model)."""
    label = res.width_label
    return f"width ({label}, log scale)" if label else "width (log scale)"


def header(res: Results, wd: float | None = None) -> str:
    text = f"{res.dataset} · {res.model}"
    return text if wd is None else f"{text} · weight decay {fmt_wd(wd)}"


def undefined_note(res: Results) -> str:
    """A caption sentence saying how many calibrations were undefined and left out, or ``""``."""
    n = len(res.undefined)
    if not n:
        return ""
    return (
        f" {n} calibration{'s' if n != 1 else ''} hit the bound of the β search: "
        f"{'their' if n != 1 else 'its'} β and calibrated loss are undefined and left out of "
        "these means (see Undefined values)."
    )


def pairs_text(res: Results) -> str:
    n = len(res.pairs)
    return f"{n} pair" if n == 1 else f"{n} pairs"


def pair_values(
    res: Results, column: str, *, weight_decay: float, method: str, width: float
) -> dict[int, float]:
    """pair -> the value of ``column`` at λ = ½ (NaN where undefined): the keyed cell that
    :mod:`lmc.stats` summarises and compares (pair p shares its seeds across the study's
    widths, weight decays and methods). A midpoint barrier (a ``*midpoint*`` key of
    :data:`lmc.metrics.BARRIER_BY_KEY`) is taken as Table 1 takes it
    (:func:`lmc.experiments.table1`): its column, else computed from the λ = 0, ½ and 1 rows;
    a calibrated one is NaN where a calibration at λ = 0, ½ or 1 is undefined."""
    by_pair: dict[int, list[dict[str, Any]]] = {}
    for r in res.select(weight_decay=weight_decay, method=method, width=width):
        by_pair.setdefault(r["pair"], []).append(r)
    barrier = BARRIER_BY_KEY.get(column) if "midpoint" in column else None
    out: dict[int, float] = {}
    for pair, rows in sorted(by_pair.items()):
        a, mid, b = (next((r for r in rows if is_close(r["lam"], v)), None) for v in (0, 0.5, 1))
        if mid is None:
            continue
        value = number(mid.get(column))
        if barrier is not None:
            ends = [r for r in (a, mid, b) if r is not None]
            if not math.isfinite(value) and a is not None and b is not None:
                curve = [number(r.get(barrier.curve)) for r in (a, mid, b)]
                value = barrier.function([0.0, 0.5, 1.0], curve)
            if barrier.curve == "calibrated_loss" and any(
                number(r.get("calibration_at_bound")) == 1.0 for r in ends
            ):
                value = math.nan
        out[pair] = value
    return out


def _series(
    res: Results, column: str, wd: float, method: str, scale: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(widths, mean, h) of ``column`` at λ = ½ over pairs (:func:`pair_values`), per width;
    h is the half-width of the mean's 95 % t-interval (NaN with one pair)."""
    widths = np.array(res.widths, dtype=float)
    cells = [
        summarize(pair_values(res, column, weight_decay=wd, method=method, width=w))
        for w in res.widths
    ]
    mean = np.array([c.mean for c in cells]) * scale
    half = np.array([c.half_width for c in cells]) * scale
    return widths, mean, half


def _endpoint_series(
    res: Results, column: str, wd: float, method: str, scale: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(widths, mean, h) over pairs of ½(value(λ=0) + value(λ=1)); h as in :func:`_series`."""
    means, halves = [], []
    for w in res.widths:
        values = []
        for p in res.pairs:
            rows = res.select(weight_decay=wd, method=method, width=w, pair=p)
            a = [r.get(column, math.nan) for r in rows if is_close(r["lam"], 0.0)]
            b = [r.get(column, math.nan) for r in rows if is_close(r["lam"], 1.0)]
            if a and b:
                values.append(0.5 * (a[0] + b[0]))
        cell = summarize(values)
        means.append(cell.mean * scale)
        halves.append(cell.half_width * scale)
    return np.array(res.widths, dtype=float), np.array(means), np.array(halves)


def _finite(values: np.ndarray) -> bool:
    return bool(np.isfinite(values).any())


def _same(series: Sequence[np.ndarray]) -> bool:
    first = series[0]
    return all(
        s.shape == first.shape and np.allclose(s, first, rtol=1e-5, atol=1e-9, equal_nan=True)
        for s in series[1:]
    )


def _errorbar(ax, x, mean, half, method: str, label: str | None = None, **kw) -> None:
    """Means with their 95 % t-intervals (``half``: half-widths; none where NaN)."""
    colour, marker, name = method_style(method)
    ok = np.isfinite(mean)
    if not ok.any():
        return
    ax.errorbar(
        x[ok],
        mean[ok],
        yerr=np.nan_to_num(half[ok]),
        color=colour,
        marker=marker,
        ms=5,
        lw=1.6,
        capsize=3,
        label=label or name,
        **kw,
    )


def _ensemble_lines(ax, res: Results, column: str, wd: float, scale: float, label: str) -> None:
    """The ensemble's mean over pairs: one black dashed line if every method has the same
    values (the ensemble of A and a permuted B is the same function), else one per method."""
    series = {m: _series(res, column, wd, m, scale) for m in res.methods}
    means = [s[1] for s in series.values()]
    if not any(_finite(m) for m in means):
        return
    if _same(means):
        x, mean, _ = next(iter(series.values()))
        ok = np.isfinite(mean)
        ax.plot(x[ok], mean[ok], color="black", ls="--", lw=1.3, marker=".", label=label)
        return
    for method, (x, mean, _) in series.items():
        ok = np.isfinite(mean)
        colour, _, name = method_style(method)
        ax.plot(x[ok], mean[ok], color=colour, ls="--", lw=1.1, label=f"{label}, {name}")


_REFERENCE_LABELS = ("ensemble", "endpoints", "LEWC")


def _legend(ax, **kw) -> None:
    """Legend with the data series first and the reference lines (ensemble, ...) after."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    order = sorted(range(len(labels)), key=lambda i: labels[i].startswith(_REFERENCE_LABELS))
    ax.legend(
        [handles[i] for i in order], [labels[i] for i in order], fontsize=7.5, framealpha=0.85, **kw
    )


def _shared_limits(axes: Sequence) -> None:
    lows, highs = zip(*(ax.get_ylim() for ax in axes))
    for ax in axes:
        ax.set_ylim(min(lows), max(highs))


# ---- merging against width ------------------------------------------------------------------
def accuracy_vs_width(res: Results, wd: float) -> Plot | Skip:
    title = f"Accuracy against width (weight decay {fmt_wd(wd)})"
    if len(res.widths) < 2:
        return Skip(title, "only one width: accuracies are in Table 1")
    fig, axes = new_figure(1, 1, panel=(6.2, 4.0))
    ax = axes[0, 0]
    _draw_accuracy(ax, res, wd)
    ax.set_title(header(res, wd), fontsize=10)
    _legend(ax, loc="best")
    caption = (
        f"Test accuracy of the merged model θ(½) against width, one colour and marker per "
        f"alignment method (mean ± 95 % t-interval over {pairs_text(res)}); dashed: the "
        f"ensemble of A and B; dotted: the endpoints' mean accuracy. The width paper predicts "
        f"the unpermuted merge's accuracy rising monotonically with width toward the endpoints'."
    )
    return Plot(f"accuracy_vs_width_wd{fmt_wd(wd)}", title, caption, render(fig))


def _draw_accuracy(ax, res: Results, wd: float, legend: bool = True) -> None:
    for method in res.methods:
        x, mean, half = _series(res, "accuracy", wd, method, 100.0)
        _errorbar(ax, x, mean, half, method, label=f"merged θ(½), {method_style(method)[2]}")
    _ensemble_lines(ax, res, "ensemble_accuracy", wd, 100.0, "ensemble")
    x, mean, _ = _endpoint_series(res, "accuracy", wd, res.methods[0], 100.0)
    ok = np.isfinite(mean)
    if ok.any():
        ax.plot(x[ok], mean[ok], color=REFERENCE, ls=":", lw=1.5, marker="x", label="endpoints")
    width_axis(ax, res.widths, width_label(res))
    ax.set_ylabel(f"{res.split} accuracy (%)")
    finish_axes(ax)


def barriers_vs_width(res: Results, wd: float) -> Plot | Skip:
    title = f"Midpoint barriers against width (weight decay {fmt_wd(wd)})"
    if len(res.widths) < 2:
        return Skip(title, "only one width: barriers are in Table 1")
    panels = [
        ("midpoint_accuracy_barrier", 100.0, "accuracy barrier (pp)", "accuracy"),
        ("midpoint_loss_barrier", 1.0, "loss barrier (nats)", "loss"),
    ]
    if res.calibrated:
        panels.append(
            (
                "calibrated_midpoint_loss_barrier",
                1.0,
                "calibrated loss barrier (nats)",
                "calibrated loss",
            )
        )
    fig, axes = new_figure(1, len(panels), panel=(4.0, 3.4))
    fig.get_layout_engine().set(h_pad=0.08, w_pad=0.08)
    for ax, (column, scale, ylabel, name) in zip(axes[0], panels):
        for method in res.methods:
            x, mean, half = _series(res, column, wd, method, scale)
            _errorbar(ax, x, mean, half, method)
        ax.axhline(0.0, color="black", lw=0.8)
        width_axis(ax, res.widths, width_label(res))
        ax.set_ylabel(ylabel)
        ax.set_title(name, fontsize=9.5)
        finish_axes(ax)
    if res.calibrated:
        _shared_limits(axes[0][1:])
    _legend(axes[0][0], loc="best")
    fig.suptitle(f"Barriers at λ = ½ · {header(res, wd)}", fontsize=10)
    calib = (
        "The uncalibrated and calibrated loss panels share one y axis. The paper finds the "
        "uncalibrated loss barrier stays clearly above zero even where accuracy matches, while "
        "the calibrated barrier falls toward zero as width grows."
        if res.calibrated
        else "Calibration was off in this study, so only uncalibrated barriers are shown; the "
        "paper finds the uncalibrated loss barrier stays above zero even at large width."
    )
    caption = (
        f"Midpoint barriers B(½) = value(θ(½)) − mean of the endpoints (accuracy sign reversed, "
        f"so a drop is positive) against width, mean ± 95 % t-interval over {pairs_text(res)}; the "
        f"black line is zero barrier. {calib}{undefined_note(res) if res.calibrated else ''}"
    )
    return Plot(f"barriers_vs_width_wd{fmt_wd(wd)}", title, caption, render(fig))


# ---- along the path -------------------------------------------------------------------------
def _path_methods(res: Results) -> list[str]:
    chosen = [m for m in ("none", "weight") if m in res.methods]
    return chosen or res.methods[:1]


def interpolation_curves(res: Results, wd: float) -> Plot | Skip:
    title = f"Interpolation curves (weight decay {fmt_wd(wd)})"
    lams = res.lams
    if len(lams) < 2:
        return Skip(title, "only one λ on the path")
    columns = [("loss", 1.0, "loss (nats)")]
    if res.calibrated:
        columns.append(("calibrated_loss", 1.0, "calibrated loss (nats)"))
    columns.append(("accuracy", 100.0, "accuracy (%)"))
    methods = _path_methods(res)
    colours = width_colours(res.widths)
    fig, axes = new_figure(len(methods), len(columns), panel=(3.7, 2.9), sharey="col")
    lam_arr = np.array(lams)
    ends = np.array([is_close(v, 0.0) or is_close(v, 1.0) for v in lams])
    for i, method in enumerate(methods):
        for j, (column, scale, ylabel) in enumerate(columns):
            ax = axes[i, j]
            for w in res.widths:
                curve = (
                    np.array(
                        [
                            res.stat(column, weight_decay=wd, method=method, width=w, lam=v)[0]
                            for v in lams
                        ]
                    )
                    * scale
                )
                if not _finite(curve):
                    continue
                ok = np.isfinite(curve)
                ax.plot(lam_arr[ok], curve[ok], color=colours[w], lw=1.6)
                mark = ok & ends
                ax.plot(
                    lam_arr[mark], curve[mark], "o", color=colours[w], ms=5, mec="black", mew=0.6
                )
            ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0], ["0\nA", "0.25", "0.5", "0.75", "1\nB"])
            ax.set_xlabel("λ")
            ax.set_ylabel(f"{res.split} {ylabel}")
            ax.set_title(f"{method_style(method)[2]}: {column.replace('_', ' ')}", fontsize=9.5)
            finish_axes(ax)
    handles = [Line2D([], [], color=colours[w], lw=2, label=fmt_width(w)) for w in res.widths]
    fig.legend(handles=handles, title="width", loc="outside right upper", fontsize=8)
    fig.suptitle(header(res, wd), fontsize=10)
    shown = " and ".join(method_style(m)[2] for m in methods)
    caption = (
        f"Loss{', calibrated loss' if res.calibrated else ''} and accuracy along "
        f"θ(λ) = (1 − λ)θ_A + λθ_B (A at the left, B at the right; circles mark the "
        f"endpoints), mean over {pairs_text(res)}, one line per width from narrow (dark) to "
        f"wide (light); rows: {shown}. Look for the bump at λ = ½ shrinking as width grows"
        f"{' and for the calibrated loss flattening' if res.calibrated else ''}."
        f"{undefined_note(res) if res.calibrated else ''}"
    )
    return Plot(f"interpolation_wd{fmt_wd(wd)}", title, caption, render(fig))


def inverse_temperature(res: Results, wd: float) -> Plot | Skip:
    title = f"Softmax inverse temperature (weight decay {fmt_wd(wd)})"
    if not res.calibrated:
        return Skip(title, "calibration was off: no inverse temperatures were fitted")
    if len(res.widths) < 2:
        return Skip(title, "only one width: inverse temperatures are in Table 1")
    fig, axes = new_figure(1, 1, panel=(6.2, 4.0))
    ax = axes[0, 0]
    for method in res.methods:
        x, mean, half = _series(res, "inverse_temperature", wd, method)
        _errorbar(ax, x, mean, half, method, label=f"merged θ(½), {method_style(method)[2]}")
    _ensemble_lines(ax, res, "ensemble_inverse_temperature", wd, 1.0, "ensemble")
    x, mean, _ = _endpoint_series(res, "inverse_temperature", wd, res.methods[0])
    ok = np.isfinite(mean)
    if ok.any():
        ax.plot(x[ok], mean[ok], color=REFERENCE, ls=":", lw=1.5, marker="x", label="endpoints")
    L = res.num_layers
    base = "none" if "none" in res.methods else res.methods[0]
    x, ens, _ = _series(res, "ensemble_inverse_temperature", wd, base)
    predicted = False
    if L is not None and _finite(ens):
        factor = 2.0 ** (L - 1)
        ok = np.isfinite(ens)
        ax.plot(
            x[ok],
            factor * ens[ok],
            color="black",
            ls="-.",
            lw=1.2,
            label=f"LEWC: 2^(L−1) × ensemble β, L = {L}",
        )
        ax.annotate(
            "midpoint β ≈ 2^(L−1) × ensemble β",
            xy=(x[ok][-1], factor * ens[ok][-1]),
            xytext=(-6, -14),
            textcoords="offset points",
            ha="right",
            fontsize=8,
        )
        predicted = True
    log_scale(ax, "y")
    width_axis(ax, res.widths, width_label(res))
    ax.set_ylabel("inverse temperature β (log scale)")
    ax.set_title(header(res, wd), fontsize=10)
    finish_axes(ax)
    _legend(ax, loc="best")
    prediction = (
        f" Dash-dotted: LEWC's prediction for the unpermuted midpoint, 2^(L−1) = "
        f"{2 ** (L - 1):g} times the ensemble's β (L = {L} layers), approached only where "
        f"LEWC holds."
        if predicted
        else " (L is unknown without layers.csv, so LEWC's 2^(L−1) prediction is not drawn.)"
    )
    caption = (
        f"Fitted inverse temperature β of the merged model θ(½) (solid, mean ± 95 % "
        f"t-interval over {pairs_text(res)}), of the ensemble (dashed) and of the endpoints "
        f"(dotted) against width. A merged model whose logits shrink needs a large β: growth of "
        f"the midpoint's β with width is itself a finding.{prediction}{undefined_note(res)}"
    )
    return Plot(f"inverse_temperature_wd{fmt_wd(wd)}", title, caption, render(fig))


# ---- layerwise ------------------------------------------------------------------------------
#: The panels of the layerwise figure of the built-in metrics (generated from the metric
#: records: :func:`lmc.analysis.layer_metrics.report_panels`; a metric registered later adds
#: its own).
LAYER_PANELS = report_panels()


def _layer_method(res: Results, wd: float) -> str | None:
    for method in ("none", *res.methods):
        if res.layer_rows(weight_decay=wd, method=method, lam=0.5):
            return method
    return None


def _layers_of(rows: list[dict[str, Any]]) -> list[tuple[int, str]]:
    seen = {}
    for r in rows:
        seen.setdefault(r.get("layer", -1), r.get("name", "") or f"layer {r.get('layer')}")
    return sorted(seen.items())


def _layer_means(rows: list[dict[str, Any]], column: str) -> dict[tuple[float, int], float]:
    """Mean over pairs of ``column`` per (width, layer)."""
    groups: dict[tuple[float, int], list[float]] = {}
    for r in rows:
        groups.setdefault((r.get("width"), r.get("layer")), []).append(r.get(column, math.nan))
    return {k: mean_std(v)[0] for k, v in groups.items()}


def layer_cosines(res: Results, wd: float) -> Plot | Skip:
    title = f"Layerwise connectivity (weight decay {fmt_wd(wd)})"
    if not res.layers:
        return Skip(title, "no layers.csv (analysis was off)")
    method = _layer_method(res, wd)
    if method is None:
        return Skip(title, f"layers.csv has no rows at λ = ½ for weight decay {fmt_wd(wd)}")
    rows = res.layer_rows(weight_decay=wd, method=method, lam=0.5)
    layers = _layers_of(rows)
    widths = sorted({r["width"] for r in rows})
    colours = width_colours(widths)
    panels = report_panels()
    fig, axes = new_figure(math.ceil(len(panels) / 2), 2, panel=(4.3, 3.2))
    for ax in axes.ravel()[len(panels) :]:
        ax.set_visible(False)
    positions = np.arange(len(layers))
    for ax, panel in zip(axes.ravel(), panels):
        column, name, formula = panel.key, panel.title, panel.axis_label
        means = _layer_means(rows, column)
        drawn = False
        for w in widths:
            values = np.array([means.get((w, layer), math.nan) for layer, _ in layers])
            ok = np.isfinite(values)
            if ok.any():
                ax.plot(positions[ok], values[ok], color=colours[w], marker="o", ms=4, lw=1.5)
                drawn = True
        if not drawn:
            no_data(ax, f"{column}: not recorded")
            ax.set_title(name, fontsize=9.5)
            continue
        if panel.reference is not None:
            ax.axhline(panel.reference, color="black", ls=":", lw=1.3)
            ax.text(
                positions[-1],
                panel.reference,
                panel.reference_label,
                ha="right",
                va="bottom",
                fontsize=7.5,
            )
        if panel.floor is not None:
            ax.set_ylim(bottom=panel.floor)
        ax.set_xticks(positions, [f"ℓ{layer}\n{label}" for layer, label in layers], fontsize=7.5)
        ax.set_xlim(-0.3, len(layers) - 0.7)
        ax.set_ylabel(formula, fontsize=8.5)
        ax.set_title(name, fontsize=9.5)
        finish_axes(ax)
    handles = [
        Line2D([], [], color=colours[w], lw=2, marker="o", label=fmt_width(w)) for w in widths
    ]
    fig.legend(handles=handles, title="width", loc="outside right upper", fontsize=8)
    fig.suptitle(f"{header(res, wd)} · {method_style(method)[2]}", fontsize=10)
    caption = (
        f"Per-layer statistics at λ = ½ ({method_style(method)[2]}), x = layer ℓ from input to "
        f"logits, one line per width from narrow (dark) to wide (light), mean over pairs: "
        f"{'; '.join(p.caption for p in panels if p.caption)}. The width paper predicts the "
        f"cosines rising toward 1 and the reciprocal ratio falling (past the input layer) as "
        f"width grows."
    )
    return Plot(f"layer_cosines_wd{fmt_wd(wd)}", title, caption, render(fig))


def _unit_records(records: list[dict] | None, wd: float) -> list[dict]:
    out = []
    for r in records or []:
        try:
            if math.isclose(float(r["weight_decay"]), wd, rel_tol=1e-12, abs_tol=0.0):
                out.append(r)
        except (TypeError, ValueError):
            continue
    return out


def _pick_layers(layers: list[tuple[int, str]]) -> list[tuple[int, str]]:
    if len(layers) <= MAX_LAYER_PANELS:
        return layers
    idx = np.unique(np.linspace(0, len(layers) - 1, MAX_LAYER_PANELS).round().astype(int))
    return [layers[i] for i in idx]


def _narrow_wide(records: list[dict]) -> tuple[list[float], int]:
    widths = sorted({float(r["width"]) for r in records})
    chosen = [widths[0]] if len(widths) == 1 else [widths[0], widths[-1]]
    pair = min(int(r["pair"]) for r in records)
    return chosen, pair


def _by_layer(records: list[dict], width: float, pair: int) -> dict[tuple[int, str], dict]:
    """(layer, name) -> {"a": record, "b": record} for one width and pair."""
    out: dict[tuple[int, str], dict] = {}
    for r in records:
        if float(r["width"]) == width and int(r["pair"]) == pair:
            out.setdefault((_layer_index(r), str(r["name"])), {})[str(r["model"]).lower()] = r
    return out


def _unit_panels(
    records: list[dict],
) -> tuple[list[float], int, dict[float, dict[tuple[int, str], dict]], list[tuple[int, str]]]:
    """What a per-unit figure (moments, spectra) draws from one weight decay's ``records``:
    the narrowest and widest widths, the lowest pair, per width the records by layer
    (:func:`_by_layer`), and the layers shown (:func:`_pick_layers`)."""
    widths, pair = _narrow_wide(records)
    per_width = {w: _by_layer(records, w, pair) for w in widths}
    layers = _pick_layers(sorted({k for d in per_width.values() for k in d}))
    return widths, pair, per_width, layers


def _layer_index(record: dict) -> int:
    """The record's layer ℓ; records without one (e.g. written without analysis) sort last."""
    try:
        return int(record["layer"])
    except (TypeError, ValueError, KeyError):
        return 10**6


def second_moments(res: Results, wd: float) -> Plot | Skip:
    title = f"Second moments of pre-activations (weight decay {fmt_wd(wd)})"
    records = _unit_records(res.moments, wd)
    if not records:
        return Skip(title, "no moments.json records for this weight decay")
    widths, pair, per_width, layers = _unit_panels(records)
    fig, axes = new_figure(len(widths), len(layers), panel=(3.0, 2.5))
    for i, w in enumerate(widths):
        for j, key in enumerate(layers):
            ax = axes[i, j]
            sides = per_width[w].get(key, {})
            arrays = {s: np.asarray(r["values"], dtype=float) for s, r in sides.items()}
            positive = [a[a > 0] for a in arrays.values()]
            if not arrays or not any(p.size for p in positive):
                no_data(ax, "no data")
                continue
            allpos = np.concatenate(positive)
            lo, hi = allpos.min(), allpos.max()
            log_axis = hi >= 10 * lo  # a log axis only where the moments span a decade or more
            if hi <= lo:
                bins = np.array([lo * 0.9, lo * 1.1])
            else:
                bins = np.geomspace(lo, hi * 1.001, 30) if log_axis else np.linspace(lo, hi, 30)
            zeros = []
            for side in ("a", "b"):
                if side in arrays:
                    a = arrays[side]
                    counts, _ = np.histogram(a[a > 0], bins=bins)
                    ax.stairs(
                        counts,
                        bins,
                        fill=True,
                        color=MODEL_COLOURS[side],
                        alpha=0.5,
                        label=f"model {side.upper()}",
                    )
                    ax.stairs(counts, bins, color=MODEL_COLOURS[side], lw=0.8)
                    zeros.append(f"{side.upper()} {int((a == 0).sum())}")
            if log_axis:
                log_scale(ax, "x")
            else:
                ax.xaxis.set_major_locator(MaxNLocator(4))
            ax.yaxis.set_major_locator(MaxNLocator(4, integer=True))
            units = max(a.size for a in arrays.values())
            ax.set_title(f"ℓ{key[0]} {key[1]} · width {fmt_width(w)} ({units} units)", fontsize=8.5)
            if any(not z.endswith(" 0") for z in zeros):
                ax.text(
                    0.98,
                    0.95,
                    "zero: " + ", ".join(zeros),
                    transform=ax.transAxes,
                    ha="right",
                    va="top",
                    fontsize=7,
                )
            ax.set_xlabel(f"√E[z̃ᵢ²]{' (log scale)' if log_axis else ''}", fontsize=8)
            if j == 0:
                ax.set_ylabel("units")
            finish_axes(ax)
    _legend(axes[0, 0], loc="upper left")
    fig.suptitle(header(res, wd), fontsize=10)
    rows_text = "narrowest (top) and widest (bottom)" if len(widths) == 2 else "the only"
    caption = (
        f"Histograms of the per-unit root second moment √E[z̃ᵢ²] of each layer's "
        f"pre-activations for models A and B (pair {pair}; log-spaced bins on a log axis where "
        f"a panel's moments span a decade or more), {rows_text} "
        f"width. The width paper finds that as width grows more units have a near-zero moment "
        f"and the large-moment units of A and B overlap less: the low-rank structure behind "
        f"weak additivity."
    )
    return Plot(f"moments_wd{fmt_wd(wd)}", title, caption, render(fig))


def spectra(res: Results, wd: float) -> Plot | Skip:
    title = f"Singular value spectra (weight decay {fmt_wd(wd)})"
    records = _unit_records(res.spectra, wd)
    if not records:
        return Skip(title, "no spectra.json records for this weight decay")
    widths, pair, per_width, layers = _unit_panels(records)
    all_widths = res.widths if all(w in res.widths for w in widths) else widths
    colours = width_colours(all_widths)
    fig, axes = new_figure(1, len(layers), panel=(3.1, 2.8), sharey="row")
    for ax, key in zip(axes[0], layers):
        for w in widths:
            for side, ls in (("a", "-"), ("b", "--")):
                record = per_width[w].get(key, {}).get(side)
                if record is None:
                    continue
                sv = np.asarray(record["singular_values"], dtype=float)
                if sv.size == 0 or not sv[0] > 0:
                    continue
                ax.plot(
                    np.arange(1, sv.size + 1) / sv.size,
                    np.maximum(sv / sv[0], 1e-8),
                    color=colours[w],
                    ls=ls,
                    lw=1.5,
                )
        ax.set_title(f"ℓ{key[0]} {key[1]}", fontsize=9)
        ax.set_xlabel("i / n (normalised index)")
        ax.set_xticks([0.0, 0.5, 1.0])
        finish_axes(ax)
    for ax in axes[0]:  # after every panel is drawn: the shared y axis spans all of them
        log_scale(ax, "y", limits_of=list(axes[0]))
    axes[0, 0].set_ylabel("σᵢ / σ₁ (log scale)")
    handles = [
        Line2D([], [], color=colours[w], lw=2, label=f"width {fmt_width(w)}") for w in widths
    ]
    handles += [
        Line2D([], [], color="black", ls="-", label="W_A"),
        Line2D([], [], color="black", ls="--", label="W_B"),
    ]
    fig.legend(handles=handles, loc="outside right upper", fontsize=8)
    fig.suptitle(header(res, wd), fontsize=10)
    caption = (
        f"Singular values σᵢ of each layer's weight matrix, normalised by the largest, against "
        f"the normalised index i/n (n singular values; pair {pair}; solid W_A, dashed W_B), "
        f"narrowest vs widest width. A fast drop means an effectively low-rank weight, which "
        f"the width paper ties to strong weight decay and to LEWC holding."
    )
    return Plot(f"spectra_wd{fmt_wd(wd)}", title, caption, render(fig))


# ---- weight-decay ablation ------------------------------------------------------------------
def weight_decay_ablation(res: Results) -> Plot | Skip:
    title = "Weight-decay ablation"
    wds = res.weight_decays
    if len(wds) < 2:
        return Skip(title, "only one weight decay in this study")
    if len(res.widths) < 2:
        return Skip(title, "only one width: compare the weight decays in Table 1")
    barrier = "calibrated_midpoint_loss_barrier" if res.calibrated else "midpoint_loss_barrier"
    nrows = 3 if res.layers else 2
    fig, axes = new_figure(nrows, len(wds), panel=(4.2, 3.2), sharey="row")
    for j, wd in enumerate(wds):
        _draw_accuracy(axes[0, j], res, wd)
        axes[0, j].set_title(f"weight decay {fmt_wd(wd)}", fontsize=10)
        ax = axes[1, j]
        for method in res.methods:
            x, mean, half = _series(res, barrier, wd, method)
            _errorbar(ax, x, mean, half, method)
        ax.axhline(0.0, color="black", lw=0.8)
        width_axis(ax, res.widths, width_label(res))
        ax.set_ylabel(f"{'calibrated ' if res.calibrated else ''}loss barrier at λ = ½ (nats)")
        finish_axes(ax)
        if nrows > 2:
            _draw_lewc_vs_width(axes[2, j], res, wd)
    for ax in axes[:, 1:].ravel():
        ax.set_ylabel("")
    for ax in axes[:-1, :].ravel():
        ax.set_xlabel("")
    for i in range(nrows):
        _legend(axes[i, -1], loc="best")
    fig.suptitle(f"{header(res)} · weight decay side by side", fontsize=10)
    lewc = (
        " Bottom: LEWC cosine at λ = ½ (no permutation) against width, one line per layer "
        "from input (dark) to logits (light)."
        if nrows > 2
        else ""
    )
    caption = (
        f"The key quantities with one column per weight decay (shared y axes per row): merged "
        f"and ensemble accuracy (top) and the {'calibrated ' if res.calibrated else ''}midpoint "
        f"loss barrier (middle) against width, mean ± 95 % t-interval over {pairs_text(res)}."
        f"{lewc} The width paper finds that weak weight decay (1e-4) raises weight rank and "
        f"breaks LEWC and LMC together: lower merged accuracy, larger barriers, lower cosines."
        f"{undefined_note(res) if res.calibrated else ''}"
    )
    return Plot("weight_decay_ablation", title, caption, render(fig))


def _draw_lewc_vs_width(ax, res: Results, wd: float) -> None:
    method = _layer_method(res, wd)
    rows = res.layer_rows(weight_decay=wd, method=method, lam=0.5) if method else []
    means = _layer_means(rows, "lewc_cosine")
    layers = _layers_of(rows)
    colours = layer_colours([layer for layer, _ in layers])
    widths = np.array(res.widths, dtype=float)
    for layer, name in layers:
        values = np.array([means.get((w, layer), math.nan) for w in res.widths])
        ok = np.isfinite(values)
        if ok.any():
            ax.plot(
                widths[ok],
                values[ok],
                color=colours[layer],
                marker="o",
                ms=4,
                lw=1.5,
                label=f"ℓ{layer} {name}",
            )
    if not layers:
        no_data(ax, "no layerwise data")
        return
    width_axis(ax, res.widths, width_label(res))
    ax.set_ylabel("LEWC cosine at λ = ½")
    finish_axes(ax)


# ---- curves beside the line (a study's [merge] paths) -------------------------------------
#: Line styles of the path kinds (the line dashed, the curves solid / dotted).
PATH_STYLES = {"line": "--", "bezier": "-", "chain": ":"}


def path_kinds(res: Results) -> list[str]:
    """The path kinds in ``res.rows`` (``line`` first; a row without ``path`` is the line)."""
    kinds = dict.fromkeys(path_kind_of(r) for r in res.rows)
    return sorted(kinds, key=lambda k: (k != "line", k))


def path_results(res: Results, kind: str) -> Results:
    """``res`` with only the rows (and ``table1.csv`` rows) of path ``kind``: every figure and
    table of the line reads ``path_results(res, "line")`` when a study has curves."""
    from dataclasses import replace

    from .results import _undefined_cells

    rows = [r for r in res.rows if path_kind_of(r) == kind]
    table = [r for r in res.table1_rows or [] if path_kind_of(r) == kind] or None
    return replace(res, rows=rows, table1_rows=table, undefined=_undefined_cells(rows))


#: The barriers drawn for curves: along the whole path (max over λ or t) and the bend.
CURVE_PANELS = (
    ("loss_barrier", 1.0, "loss barrier, max over the path (nats)"),
    ("accuracy_barrier", 100.0, "accuracy barrier, max over the path (pp)"),
    ("bend_distance", 1.0, "bend ‖θ_C − mid‖ / ‖θ_A − θ_B‖"),
)


def curves_vs_width(res: Results, wd: float) -> Plot | Skip:
    """Each path's barrier along its whole length (max over λ or t above the chord between the
    endpoints' values) against width, one colour per method and one line style per path
    (line dashed, Bézier solid, chain dotted), and each curve's bend distance."""
    title = f"Curves against the line (weight decay {fmt_wd(wd)})"
    kinds = path_kinds(res)
    if kinds == ["line"]:
        return Skip(title, "the study fitted no curve ([merge] paths)")
    by_kind = {k: path_results(res, k) for k in kinds}
    fig, axes = new_figure(1, len(CURVE_PANELS), panel=(4.0, 3.4))
    for ax, (column, scale, ylabel) in zip(axes[0], CURVE_PANELS):
        for kind, sub in by_kind.items():
            if column == "bend_distance" and kind == "line":
                continue
            for method in sub.methods:
                x, mean, half = _series(sub, column, wd, method, scale)
                name = method_style(method)[2]
                _errorbar(ax, x, mean, half, method, label=f"{name}, {kind}",
                          ls=PATH_STYLES.get(kind, "-."))  # fmt: skip
        if column != "bend_distance":
            ax.axhline(0.0, color="black", lw=0.8)
        width_axis(ax, res.widths, width_label(res))
        ax.set_ylabel(ylabel)
        finish_axes(ax)
    _legend(axes[0][0], loc="best")
    fig.suptitle(f"Line and curves · {header(res, wd)}", fontsize=10)
    caption = (
        "The barrier along each path, max over λ (the line) or t (a curve) of the loss above "
        "the chord between the endpoints' losses (and the accuracy below it), against width, "
        f"mean ± 95 % t-interval over {pairs_text(res)}; one colour per alignment method, the "
        "line dashed, a Bézier curve solid, a chain dotted. Right: each curve's bend, the "
        "distance of its control point from the line's midpoint relative to ‖θ_A − θ_B‖ "
        "(0: the curve is the line). Garipov et al. find curves of nearly constant loss where "
        "the line has a barrier."
    )
    return Plot(f"curves_vs_width_wd{fmt_wd(wd)}", title, caption, render(fig))


#: At most this many planes are drawn in one report.
MAX_PLANES = 4


def curve_planes(res: Results, planes: list[dict[str, Any]] | None, wd: float) -> Plot | Skip:
    """The loss on the plane through A, B and a curve's control point (``planes.json``), for
    each method and curve at the study's widest width (its first pair), at most
    :data:`MAX_PLANES` panels: filled contours with the line dashed and the curve solid."""
    from lmc.metrics.plane import PlaneResult, draw_plane

    title = f"Loss planes through A, B and the control point (weight decay {fmt_wd(wd)})"
    records = [p for p in planes or [] if number(p.get("weight_decay")) == wd and p.get("plane")]
    if not records:
        return Skip(title, "no plane was evaluated (planes.json is absent or has none here)")
    widest = max(number(p.get("width")) for p in records)
    chosen: dict[tuple[str, str], dict[str, Any]] = {}
    for p in sorted(records, key=lambda p: number(p.get("pair"))):
        key = (str(p.get("method")), str(p.get("path")))
        if number(p.get("width")) == widest and key not in chosen:
            chosen[key] = p
    picked = list(chosen.items())[:MAX_PLANES]
    fig, axes = new_figure(1, len(picked), panel=(4.4, 3.8))
    for ax, ((method, kind), record) in zip(axes[0], picked):
        plane = PlaneResult.from_dict(record["plane"])
        filled = draw_plane(ax, plane)
        fig.colorbar(filled, ax=ax, label=f"{res.split} loss (nats)", shrink=0.8)
        ax.set_title(
            f"{method_style(method)[2]}, {kind} · width {fmt_width(widest)} · pair "
            f"{int(number(record.get('pair')))}",
            fontsize=9,
        )
    fig.suptitle(header(res, wd), fontsize=10)
    caption = (
        "The loss on the plane through A (0, 0), B (1, 0) and the curve's control point θ_C, "
        "in Garipov et al.'s orthonormalised basis: x along θ_B − θ_A, y orthogonal to it "
        "towards θ_C, both in units of ‖θ_B − θ_A‖ (B aligned to A by the method first); the "
        "line is dashed, the curve (which lies in this plane) solid. One pair per panel: the "
        "widest width's first pair."
    )
    return Plot(f"curve_planes_wd{fmt_wd(wd)}", title, caption, render(fig))


PER_WEIGHT_DECAY = (
    accuracy_vs_width,
    barriers_vs_width,
    interpolation_curves,
    inverse_temperature,
    layer_cosines,
    second_moments,
    spectra,
)
