"""The report of an onset study (``experiment = "onset"``, Git Re-Basin Fig. 3).

Reads ``study.json``, ``barriers.csv`` and ``study.toml`` (optional) of a folder written by
:mod:`lmc.experiments.onset_study` and writes ``report.md``, ``report.html`` and
``figures/onset.{png,svg}``: the claim, a verdict computed from the recorded barriers, one
table per method of the barriers against the training epoch of both endpoints (mean ± the
half-width of its 95 % t-interval over pairs, :mod:`lmc.stats`), paired verdicts at the last
epoch (:func:`paired_sentence`), and the figure of the barrier against the epoch, one line per
method with its 95 % band. Never computes a model: the numbers are the files'.

Connectivity along training (``[onset] alignment``, Sharma et al. 2024): a ``connectivity``
column says whether a row's alignment was found at its own epoch (``weak``, the method's own
name here) or between the final models and applied at every epoch (``strong``: the series
``"<method> (strong)"``, drawn dashed in the method's colour beside its weak line, with a
sentence on the epochs where each connects the pair); a file without the column holds weak rows
only. A ``width`` column (a study at several widths) gives one verdict, one set of tables and
one row of panels per width; without it the study is at its one width.

Units: losses are mean cross-entropies in nats; accuracies are fractions in the files and
shown in percent (barriers in percentage points). The path is θ(λ) = (1 − λ)θ_A + λθ_B with
λ = 0 at A; ``max_minus_mean_loss`` (Git Re-Basin's barrier) is max_λ L(λ) − ½(L_A + L_B),
``loss_barrier`` (Frankle et al.'s) max_λ [L(λ) − ((1 − λ)L_A + λL_B)].
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from lmc.config import LmcError
from lmc.stats import compare, half_width

from .document import Block, Heading, Note, Para, Table
from .figures import Plot
from .page import Figures, Page, read_record
from .style import finish_axes, fmt_width, method_style, new_figure, render

#: The verdict's thresholds: after weight matching the last epoch's barrier must be at most
#: ``FALL`` times its largest value at an earlier epoch (it fell over training) and at most
#: ``FALL`` times the naive barrier at the last epoch (alignment connects the trained pair).
FALL = 0.5
#: Series the report summarises: column -> (label, scale from the file's unit to the shown one).
SERIES = {
    "max_minus_mean_loss": ("loss barrier, max − mean (nats)", 1.0),
    "loss_barrier": ("loss barrier, Frankle (nats)", 1.0),
    "accuracy_barrier": ("accuracy barrier (points)", 100.0),
}

Summary = dict[str, dict[int, dict[str, tuple[float, float, int]]]]
#: The suffix of a strong-connectivity series' name (:func:`series_name`).
STRONG = " (strong)"


def series_name(row: dict) -> str:
    """The series a barriers.csv row belongs to: its method (each epoch's own alignment: weak
    connectivity, and every row of a file without a ``connectivity`` column), or
    ``"<method> (strong)"`` (the final models' alignment at every epoch)."""
    return row["method"] + (STRONG if row.get("connectivity") == "strong" else "")


def _base(series: str) -> str:
    return series.removesuffix(STRONG)


def by_width(rows: list[dict], width: Any = None) -> dict[Any, list[dict]]:
    """The rows of each width, in increasing width (the ``width`` column; a file without it is
    at the one width ``width``)."""
    if not rows or "width" not in rows[0]:
        return {width: rows}
    return {w: [r for r in rows if r["width"] == w] for w in sorted({r["width"] for r in rows})}


def _read(folder: Path) -> tuple[dict[str, Any], str | None, list[dict]]:
    from lmc.experiments import read_csv

    record, toml = read_record(folder, ("barriers.csv",))
    rows = read_csv(folder / "barriers.csv")
    if not rows:
        raise LmcError(f"{folder / 'barriers.csv'} has no rows")
    for column in ("epoch", "method", "pair", *SERIES, "accuracy_a", "accuracy_b"):
        if column not in rows[0]:
            raise LmcError(f"{folder / 'barriers.csv'} has no column {column!r}")
    return record, toml, rows


def summarise(rows: list[dict]) -> Summary:
    """series (:func:`series_name`) -> epoch -> column -> (mean, sample std, pairs) over the
    pairs, for the
    :data:`SERIES` columns and ``endpoint_accuracy`` (the mean of A's and B's accuracy, a
    fraction), in the files' units."""
    from lmc.experiments.cells import mean_std, method_sort_key

    out: Summary = {}
    names = {series_name(r) for r in rows}
    for method in sorted(names, key=lambda n: (method_sort_key(_base(n)), n)):
        mine = [r for r in rows if series_name(r) == method]
        out[method] = {}
        for epoch in sorted({int(r["epoch"]) for r in mine}):
            at = [r for r in mine if int(r["epoch"]) == epoch]
            cells = {key: mean_std(r[key] for r in at) for key in SERIES}
            cells["endpoint_accuracy"] = mean_std(
                0.5 * (r["accuracy_a"] + r["accuracy_b"]) for r in at
            )
            out[method][epoch] = cells
    return out


def _mean(summary: Summary, method: str, epoch: int, key: str = "max_minus_mean_loss") -> float:
    return summary[method][epoch][key][0]


def verdict(summary: Summary) -> str:
    """One paragraph on the claim, from the recorded barriers (max − mean, nats; means over
    pairs). The fall over training is confirmed when, after weight matching, the last epoch's
    barrier is at most :data:`FALL` times both its largest value at an earlier epoch and the
    naive barrier at the last epoch. The first compared epoch (initialisation, when 0) is
    judged apart: when both its barriers are at most :data:`FALL` times that earlier peak,
    the pair was not disconnected there, and the verdict says so."""
    if "weight" not in summary or "none" not in summary:
        return (
            "**No verdict:** the claim compares weight matching with no alignment; this study "
            f"ran {', '.join(summary)} only."
        )
    epochs = sorted(set(summary["weight"]) & set(summary["none"]))
    if len(epochs) < 2:
        return "**No verdict:** the claim is about a trend over training; one epoch was compared."
    last, earlier = epochs[-1], epochs[:-1]
    w_last, n_last = _mean(summary, "weight", last), _mean(summary, "none", last)
    peak = max(earlier, key=lambda e: _mean(summary, "weight", e))
    w_peak, n_peak = _mean(summary, "weight", peak), _mean(summary, "none", peak)
    first = epochs[0]
    w0, n0 = _mean(summary, "weight", first), _mean(summary, "none", first)
    if not all(math.isfinite(v) for v in (w_last, n_last, w_peak, n_peak, w0, n0)):
        return "**No verdict:** a barrier is undefined (NaN) in barriers.csv."
    fell = w_last <= FALL * w_peak
    connects = w_last <= FALL * n_last
    start = "initialisation" if first == 0 else f"epoch {first}"
    small_at_start = first != peak and max(w0, n0) <= FALL * w_peak
    facts = (
        f"after weight matching the loss barrier (max − mean) is {w_peak:.3f} nats at its "
        f"largest before the last epoch (epoch {peak}; {_ratio(w_peak, n_peak)} of the naive "
        f"barrier then) and {w_last:.3f} nats at epoch {last}, where without alignment it is "
        f"{n_last:.3f} nats ({_ratio(w_last, n_last)} of it)"
    )
    if fell and connects:
        label = f"Confirmed after {start}, not at it" if small_at_start else "Confirmed"
        head = f"**{label}:** {facts}."
    elif fell or connects:
        missing = (
            f"it did not fall to at most {FALL:g} of the naive barrier"
            if fell
            else f"it did not fall to at most {FALL:g} of its earlier peak"
        )
        head = f"**Partly confirmed:** {facts}; {missing}."
    else:
        head = (
            f"**Not confirmed:** {facts}; weight matching does not make the trained pair "
            "markedly more connected than at earlier epochs."
        )
    acc0 = summary["none"][first]["endpoint_accuracy"][0]
    tail = (
        f" At {start} the barriers are {w0:.3f} (weight matching) and {n0:.3f} nats (none), "
        f"with endpoints {100 * acc0:.1f} % accurate"
    )
    if small_at_start:
        tail += (
            f": the pair is not disconnected there, and the barrier after matching first "
            f"rises with training (to {w_peak:.3f} nats at epoch {peak})"
            f"{' before it falls' if fell else ''}"
        )
    return head + tail + "."


def strong_sentence(summary: Summary, method: str = "weight") -> str:
    """One sentence on strong against weak connectivity (Sharma et al. 2024) for ``method``
    (empty without its strong series or ``none``): the first epoch from which on each
    alignment keeps the barrier (max − mean, nats, mean over pairs) at most :data:`FALL`
    times the naive one, and the two barriers at the first epoch after the initialisation."""
    strong = method + STRONG
    if strong not in summary or method not in summary or "none" not in summary:
        return ""
    epochs = sorted(set(summary[strong]) & set(summary[method]) & set(summary["none"]))
    if not epochs:
        return ""

    def onset(series: str) -> int | None:
        ok = [_mean(summary, series, e) <= FALL * _mean(summary, "none", e) for e in epochs]
        for i, e in enumerate(epochs):
            if all(ok[i:]):
                return e
        return None

    def said(e: int | None) -> str:
        return "at no compared epoch" if e is None else f"from epoch {e} on"

    first = next((e for e in epochs if e > 0), epochs[0])
    label = method_style(method)[2].lower()
    return (
        f"With the final models' {label} applied at every epoch (strong connectivity) the "
        f"barrier is at most {FALL:g} of the naive one {said(onset(strong))}; with each "
        f"epoch's own (weak) {said(onset(method))}. At epoch {first} the barrier is "
        f"{_mean(summary, strong, first):.3f} nats (strong) against "
        f"{_mean(summary, method, first):.3f} (weak) and {_mean(summary, 'none', first):.3f} "
        "(none)."
    )


def _ratio(a: float, b: float) -> str:
    """``a / b`` in percent, to two significant digits below 10 %."""
    if not (b > 0 and math.isfinite(a / b)):
        return "undefined"
    pct = 100 * a / b
    return f"{pct:.0f} %" if abs(pct) >= 10 else f"{pct:.2g} %"


def _cell(stats: tuple[float, float, int], scale: float, digits: int) -> str:
    """``mean ± h`` (h: the half-width of the mean's 95 % t-interval) of a summary cell
    ``(mean, sample std, n)``, scaled; the mean alone with one pair."""
    mean, std, n = stats
    if not math.isfinite(mean):
        return "undefined"
    text = f"{scale * mean:.{digits}f}"
    half = half_width(std, n)
    if math.isfinite(half):
        text += f" ± {scale * half:.{digits}f}"
    return text


def paired_sentence(rows: list[dict], method: str = "weight") -> str:
    """Paired verdicts (:func:`lmc.stats.compare`, pairs keyed by the ``pair`` column) on
    Git Re-Basin's loss barrier (max − mean, nats) at the last epoch both series share:
    ``method`` against ``none``; with a strong series, at the first trained epoch before the
    last, the final models' alignment against the one found at that epoch (at the last epoch
    they are the same alignment). Empty without ``method`` and ``none``."""
    by_series: dict[str, dict[int, dict[Any, float]]] = {}
    for r in rows:
        series = by_series.setdefault(series_name(r), {})
        series.setdefault(int(r["epoch"]), {})[r["pair"]] = float(r["max_minus_mean_loss"])
    if method not in by_series or "none" not in by_series:
        return ""
    shared = sorted(set(by_series[method]) & set(by_series["none"]))
    if not shared:
        return ""
    last = shared[-1]
    text = (
        f"Paired over the pairs (the same seeds), the loss barrier (max − mean) at epoch {last}: "
        f"{method_style(method)[2]} − none, "
        f"{compare(by_series['none'][last], by_series[method][last])}"
    )
    strong = by_series.get(method + STRONG, {})
    early = [e for e in shared if 0 < e < last and e in strong]
    if early:
        first = early[0]
        text += (
            f"; at epoch {first}, the final models' alignment − that epoch's own, "
            f"{compare(by_series[method][first], strong[first])}"
        )
    return text + "."


#: The tables' caption note on a strong series.
FINAL_NOTE = "; B aligned with the alignment found between the final models"


def _tables(summary: Summary, pairs: int, level: int = 3) -> list[Block]:
    blocks: list[Block] = []
    for method, epochs in summary.items():
        strong = method.endswith(STRONG)
        label = method_style(_base(method))[2] + (", strong" if strong else "")
        rows = []
        for epoch, cells in epochs.items():
            row = [str(epoch)]
            for key, (_, scale) in SERIES.items():
                row.append(_cell(cells[key], scale, 1 if scale != 1.0 else 3))
            row.append(_cell(cells["endpoint_accuracy"], 100.0, 1))
            if method != "none" and "none" in summary and epoch in summary["none"]:
                row.append(
                    _ratio(
                        cells["max_minus_mean_loss"][0],
                        summary["none"][epoch]["max_minus_mean_loss"][0],
                    )
                )
            rows.append(row)
        header = ["epoch", *(name for name, _ in SERIES.values()), "endpoint accuracy (%)"]
        if method != "none" and "none" in summary:
            header.append("max − mean / none's")
        blocks += [
            Heading(level, f"{label} (`{_base(method)}`{', final alignment' if strong else ''})"),
            Table(
                header,
                rows,
                caption=(
                    f"Mean ± 95 % t-interval over {pairs} pair(s) of the barriers between A and "
                    f"{'B' if method == 'none' else 'B aligned onto A'} after that many "
                    "epochs of both (0 = initialisation"
                    f"{FINAL_NOTE if strong else ''}"
                    "); endpoint accuracy: the mean of A's and B's."
                ),
                align=["r"] * len(header),
            ),
        ]
    return blocks


def _figure(summaries: dict[Any, Summary]) -> Plot:
    """One row of panels (loss, accuracy barrier) per width of ``summaries`` (width ->
    summary; one key ``None`` for a study at one width)."""
    fig, axes = new_figure(len(summaries), 2, panel=(5.0, 3.6))
    panels = (("max_minus_mean_loss", "loss barrier, max − mean (nats)"),
              ("accuracy_barrier", "accuracy barrier (points)"))  # fmt: skip
    cells = [
        (ax, key, ylabel, width, summary)
        for row, (width, summary) in zip(axes, summaries.items())
        for ax, (key, ylabel) in zip(row, panels)
    ]
    for ax, key, ylabel, width, summary in cells:
        scale = SERIES[key][1]
        for method, epochs in summary.items():
            strong = method.endswith(STRONG)
            colour, marker, label = method_style(_base(method))
            if strong:
                label += ", strong (final alignment)"
            xs = list(epochs)
            mean = [scale * epochs[e][key][0] for e in xs]
            half = [scale * half_width(*epochs[e][key][1:]) for e in xs]
            ax.plot(xs, mean, color=colour, marker=marker, ms=4, lw=1.6, label=label,
                    ls="--" if strong else "-", mfc="white" if strong else colour)  # fmt: skip
            if any(math.isfinite(h) and h > 0 for h in half):
                low = [m - (h if math.isfinite(h) else 0.0) for m, h in zip(mean, half)]
                high = [m + (h if math.isfinite(h) else 0.0) for m, h in zip(mean, half)]
                ax.fill_between(xs, low, high, color=colour, alpha=0.18, lw=0)
        ax.axhline(0.0, color="#555555", lw=0.8)
        ax.set_xticks(sorted({e for epochs in summary.values() for e in epochs}))
        ax.set_xlabel("training epoch of A and B (0 = initialisation)")
        ax.set_ylabel(ylabel)
        finish_axes(ax)
        ax.legend(fontsize=8)
        at = "" if width is None else f" (width {fmt_width(width)})"
        what = "loss" if key == "max_minus_mean_loss" else "accuracy"
        ax.set_title(f"{what} barrier against training time{at}")
    fig.suptitle("Git Re-Basin Fig. 3: when does permutation alignment connect the pair?")
    caption = (
        "The barrier of the path θ(λ) = (1 − λ)θ_A + λθ_B (λ = 0 is A; B permuted onto A for "
        "weight matching) between two models after the same number of training epochs, "
        "against that epoch. Left: Git Re-Basin's loss barrier max_λ L(λ) − ½(L_A + L_B) "
        "(mean cross-entropy, nats); right: the accuracy barrier, the largest drop below the "
        "chord (percentage points). Lines: mean over pairs; bands: the mean's 95 % t-interval."
    )
    if any(m.endswith(STRONG) for summary in summaries.values() for m in summary):
        caption += (
            " Dashed: strong connectivity, B aligned at every epoch with the alignment found "
            "between the final models (solid: each epoch's own, weak)."
        )
    if len(summaries) > 1:
        caption += " One row per width."
    return Plot("onset", "Barrier against training epoch", caption, render(fig))


#: The claim the onset report checks (its first paragraph).
CLAIM = (
    "Git Re-Basin (Ainsworth et al. 2023, Fig. 3) claims that linear mode connectivity modulo "
    "permutation emerges during training: early in training (initialisation included) weight "
    "matching does not connect two independently trained models linearly, and as training "
    "proceeds the loss barrier after weight matching falls toward zero while the barrier "
    "without alignment stays high. Here both endpoints of each pair are compared after the "
    "same number of epochs of their own runs."
)


def _grid_size(lambdas: Any) -> str:
    from lmc.metrics import lambda_grid

    try:
        return str(len(lambda_grid(lambdas)[0]))
    except (LmcError, TypeError):
        return "?"


def onset_page(folder: Path, title: str | None = None, quiet: bool = True) -> Page:
    """The onset study's report of the results folder ``folder`` (module docstring), as
    :func:`lmc.report.write_report` writes it."""
    record, toml, rows = _read(folder)
    config = record.get("config", {})
    settings = config.get("onset", {})
    groups = by_width(rows)
    several = "width" in rows[0]
    rows_of = {w if several else None: mine for w, mine in groups.items()}
    summaries = {w: summarise(mine) for w, mine in rows_of.items()}
    pairs = len({int(r["pair"]) for r in rows})
    width = settings.get("width", "?")
    if isinstance(width, list):
        width = ", ".join(fmt_width(w) for w in width)
    model, train, data = (config.get(k, {}) for k in ("model", "train", "data"))
    setup = Note(
        f"{pairs} pair(s) (A seed s + 2p, B seed s + 2p + 1, s = "
        f"{settings.get('seed', '?')}); model {model.get('name', '?')} width "
        f"{width}, {train.get('epochs', '?')} training epochs, "
        f"weight decay {settings.get('weight_decay', '?')}; measured on the "
        f"{data.get('split', '?')} split of {data.get('dataset', '?')} at "
        f"{_grid_size(settings.get('lambdas'))} values of λ."
    )

    def readings(width: Any, summary: Summary) -> list[Block]:
        blocks: list[Block] = [] if width is None else [Heading(2, f"Width {fmt_width(width)}")]
        blocks.append(Para(verdict(summary)))
        strong = strong_sentence(summary)
        if strong:
            blocks.append(Para(strong))
        paired = paired_sentence(rows_of[width])
        if paired:
            blocks.append(Para(paired))
        return blocks

    def body(figures: Figures) -> list[Block]:
        tables: list[Block] = [Heading(2, "Barriers against the training epoch")]
        for width, summary in summaries.items():
            if width is not None:
                tables.append(Heading(3, f"Width {fmt_width(width)}"))
            tables += _tables(summary, pairs, 3 if width is None else 4)
        return [
            Para(CLAIM),
            *(b for width, summary in summaries.items() for b in readings(width, summary)),
            *tables,
            Heading(2, "Figure"),
            figures.block(_figure(summaries)),
            setup,
        ]

    title = title or f"Onset of linear mode connectivity ({record.get('name', 'onset')})"
    return Page(title, body, record, folder, toml)
