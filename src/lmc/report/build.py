"""The width study's report (``experiment = "width"``): a results folder -> the page of
figures, Table 1, paired comparisons and text that :func:`lmc.report.write_report` writes as
``report.md``, a self-contained ``report.html`` and ``figures/`` (:func:`width_page`, named by
the width kind's record in :mod:`lmc.experiments.kinds`).

Statistics (docs/science.md, "Statistics and verdicts"; :mod:`lmc.stats`): every ± is the
half-width of the mean's 95 % t-interval over the pairs (n in the table's ``pairs`` column);
comparisons are paired by the pair index p, whose runs share their seeds across the study's
widths, weight decays and methods, and each verdict is :func:`lmc.stats.verdict`'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from lmc.config import progress
from lmc.stats import MIN_PAIRS, compare, summarize, verdict

from . import figures as width_figures
from .document import Block, Bullets, Heading, Note, Para, Table
from .page import DASH, Figures, Page
from .results import Results, load_results, method_sort_key
from .stitch import stitch_blocks
from .style import fmt_wd, fmt_width, method_style
from .table import CALIBRATION_COLUMNS, merge_table1, table1


# ---- number formatting ----------------------------------------------------------------------
def _ok(*values: Any) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def fmt_pm(mean: float, half: float, scale: float = 1.0, digits: int = 3) -> str:
    """``mean ± h`` after scaling (e.g. 100 for percent or percentage points), both to
    ``digits`` places (a table column keeps one format); the mean alone when ``h`` is not
    finite (one pair: no interval). In Table 1 ``h`` is the half-width of the 95 %
    t-interval."""
    if not _ok(mean):
        return DASH
    text = f"{mean * scale:.{digits}f}"
    return f"{text} ± {half * scale:.{digits}f}" if _ok(half) else text


def fmt_num(value: float, scale: float = 1.0, digits: int = 2) -> str:
    return f"{value * scale:.{digits}f}" if _ok(value) else DASH


def fmt_beta(value: float) -> str:
    if not _ok(value):
        return DASH
    return f"{value:.2f}" if abs(value) < 100 else f"{value:.0f}"


# ---- Table 1 --------------------------------------------------------------------------------
UNDEFINED_HEADER = "pairs with undefined calibration"
SHORT_MARK = "†"
#: Table 1 headers whose values leave out the pairs with an undefined calibration.
CALIBRATED_HEADERS = ("calibrated loss barrier (nats)", "β merged", "β ensemble")
#: Table 1 headers that are labels, not values resting on pairs.
LABEL_HEADERS = ("width", "method")
# (header, row -> cell, align, columns that must be finite somewhere for it to be shown)
TABLE1_VIEW: tuple[tuple[str, Callable[[dict], str], str, tuple[str, ...]], ...] = (
    ("width", lambda r: fmt_width(float(r["width"])), "r", ()),
    ("method", lambda r: method_style(r["method"])[2], "l", ()),
    ("pairs", lambda r: str(int(r["pairs"])), "r", ()),
    (
        "endpoint acc. (%)",
        lambda r: fmt_num(r["endpoint_accuracy_mean"], 100.0),
        "r",
        ("endpoint_accuracy_mean",),
    ),
    (
        "merged acc. (%)",
        lambda r: fmt_pm(
            r["merged_accuracy_mean"], r.get("merged_accuracy_ci95", math.nan), 100.0, 2
        ),
        "r",
        ("merged_accuracy_mean",),
    ),
    (
        "ensemble acc. (%)",
        lambda r: fmt_num(r["ensemble_accuracy_mean"], 100.0),
        "r",
        ("ensemble_accuracy_mean",),
    ),
    (
        "accuracy barrier (pp)",
        lambda r: fmt_pm(
            r["midpoint_accuracy_barrier_mean"],
            r.get("midpoint_accuracy_barrier_ci95", math.nan),
            100.0,
        ),
        "r",
        ("midpoint_accuracy_barrier_mean",),
    ),
    (
        "loss barrier (nats)",
        lambda r: fmt_pm(
            r["midpoint_loss_barrier_mean"], r.get("midpoint_loss_barrier_ci95", math.nan)
        ),
        "r",
        ("midpoint_loss_barrier_mean",),
    ),
    (
        "calibrated loss barrier (nats)",
        lambda r: fmt_pm(
            r["calibrated_midpoint_loss_barrier_mean"],
            r.get("calibrated_midpoint_loss_barrier_ci95", math.nan),
        ),
        "r",
        ("calibrated_midpoint_loss_barrier_mean",),
    ),
    (
        "β merged",
        lambda r: fmt_beta(r["inverse_temperature_mean"]),
        "r",
        ("inverse_temperature_mean",),
    ),
    (
        "β ensemble",
        lambda r: fmt_beta(r["ensemble_inverse_temperature_mean"]),
        "r",
        ("ensemble_inverse_temperature_mean",),
    ),
    (
        UNDEFINED_HEADER,
        lambda r: fmt_count(r.get("undefined_calibration_pairs")),
        "r",
        ("undefined_calibration_pairs",),
    ),
)


def fmt_count(value: Any) -> str:
    return str(int(value)) if _ok(value) else DASH


def asked_pairs(res: Results) -> int:
    """The number of pairs the study asked for: ``sweep.pairs`` of the recorded configuration,
    else the number of distinct pairs in ``results.csv``."""
    sweep = res.study.get("config", {}).get("sweep", {}) if isinstance(res.study, dict) else {}
    value = sweep.get("pairs") if isinstance(sweep, dict) else None
    if isinstance(value, (int, float)) and math.isfinite(value) and value >= 1:
        return int(value)
    return len(res.pairs)


def cell_pairs(row: dict, header: str) -> float:
    """How many pairs a Table 1 cell rests on: the row's ``pairs``, less those with an
    undefined calibration for the calibrated columns (:data:`CALIBRATED_HEADERS`)."""
    pairs = row.get("pairs")
    pairs = float(pairs) if _ok(pairs) else math.nan
    undefined = row.get("undefined_calibration_pairs")
    if header in CALIBRATED_HEADERS and _ok(undefined):
        return pairs - float(undefined)
    return pairs


def short_footnote(asked: int) -> str:
    """What :data:`SHORT_MARK` means under Table 1."""
    return (
        f"{SHORT_MARK} rests on fewer pairs than the study's {asked}: a marked pairs count means "
        "pairs are missing from the results for that row (e.g. jobs not finished or failed), "
        "so each of its values averages over those pairs only; a calibrated value (calibrated "
        "loss barrier, β) is also marked where pairs with an undefined calibration were left "
        "out of it (see Undefined values)."
    )


#: What every ± of Table 1 is, stated in its caption.
TABLE1_STATISTIC = "mean ± 95 % t-interval over n pairs (n: column pairs; n = 1: no interval)"


def table1_block(rows: list[dict], caption: str = "", asked: int | None = None) -> Table:
    """Table 1 rows (one weight decay) as a table, its caption ending with
    :data:`TABLE1_STATISTIC`; columns with no finite value are dropped,
    and the count of pairs with an undefined calibration unless some pair has one. With
    ``asked`` (the study's number of pairs), every value cell resting on fewer pairs
    (:func:`cell_pairs`) carries :data:`SHORT_MARK` and the table a footnote saying so."""
    view = [v for v in TABLE1_VIEW if all(any(_ok(r.get(c)) for r in rows) for c in v[3])]
    counts = [r.get("undefined_calibration_pairs") for r in rows]
    if not any(_ok(c) and c > 0 for c in counts):
        view = [v for v in view if v[0] != UNDEFINED_HEADER]
    marked = False

    def cell(row: dict, header: str, text: str) -> str:
        nonlocal marked
        if asked is None or header in LABEL_HEADERS + (UNDEFINED_HEADER,) or text == DASH:
            return text
        if cell_pairs(row, header) < asked:
            marked = True
            return text + SHORT_MARK
        return text

    body = [[cell(r, v[0], v[1](r)) for v in view] for r in rows]
    return Table(
        header=[v[0] for v in view],
        rows=body,
        caption=f"{caption} · {TABLE1_STATISTIC}" if caption else TABLE1_STATISTIC,
        align=[v[2] for v in view],
        footnote=short_footnote(asked) if marked and asked is not None else "",
        wide=True,
    )


# ---- text pieces ----------------------------------------------------------------------------
def _list(values: list, fmt: Callable = str) -> str:
    return ", ".join(fmt(v) for v in values) if values else DASH


def calibration_text(res: Results) -> str:
    """How the results were calibrated: one clause per calibration used
    (``Results.calibrations``)."""
    parts = []
    for method, value in res.calibrations:
        if method == "crossfit":
            parts.append(
                f"cross-fitted over {value} folds: for each fold β is fitted on the other "
                f"{value - 1} folds and the loss is measured on the held-out fold, so every "
                "example is scored once, by a β that never saw it"
            )
        else:
            share = 0.2 if value is None else value
            parts.append(
                f"split: β fitted on a random {share:.0%} of the split, loss measured on the "
                f"other {1 - share:.0%}"
            )
    return "; ".join(parts)


def study_summary(res: Results) -> str:
    name = res.study.get("name")
    unit = f" ({res.width_label})" if res.width_label else ""  # the model registry's words
    lams = res.lams
    grid = f"{len(lams)} values of λ from {lams[0]:g} to {lams[-1]:g}" if lams else "no λ"
    calib = (
        "Losses are reported raw and after softmax temperature calibration "
        f"({calibration_text(res)})."
        if res.calibrated
        else "Calibration was off: only raw losses are reported."
    )
    parts = [
        f"Study `{name}`: " if name else "",
        f"dataset **{res.dataset}**, model **{res.model}**, widths {_list(res.widths, fmt_width)}"
        f"{unit}, weight decays {_list(res.weight_decays, fmt_wd)}, {len(res.pairs)} "
        f"independent pair{'s' if len(res.pairs) != 1 else ''} (A, B) per setting, merge methods "
        f"{_list([method_style(m)[2] for m in res.methods])}. ",
        f"Each pair is evaluated on the `{res.split}` split along θ(λ) = (1 − λ)θ_A + λθ_B "
        f"({grid}; λ = 0 is A, λ = 1 is B); BatchNorm handling: `{res.bn}`. {calib} ",
        "Figures show accuracy in percent, accuracy barriers in percentage points (pp) and "
        "losses in nats; ± is the half-width of the mean's 95 % t-interval over pairs "
        "(t with n − 1 degrees of freedom; none with one pair), and comparisons are paired by "
        "pair (see Paired comparisons).",
    ]
    return "".join(parts)


def headline(res: Results, t1: list[dict]) -> list[str]:
    """One sentence per (weight decay, method): narrowest vs widest width, from Table 1."""
    items = []
    barrier = "calibrated_midpoint_loss_barrier_mean"
    if not any(_ok(r.get(barrier)) for r in t1):
        barrier = "midpoint_loss_barrier_mean"
    kind = "calibrated " if barrier.startswith("calibrated") else ""
    for wd in res.weight_decays:
        for method in res.methods:
            rows = [r for r in t1 if r["weight_decay"] == wd and r["method"] == method]
            if not rows:
                continue
            rows.sort(key=lambda r: float(r["width"]))
            lo, hi = rows[0], rows[-1]

            def at(r: dict) -> str:
                return (
                    f"{fmt_num(r['merged_accuracy_mean'], 100.0, 1)}% merged accuracy "
                    f"(endpoints {fmt_num(r['endpoint_accuracy_mean'], 100.0, 1)}%), "
                    f"{kind}loss barrier {fmt_num(r[barrier], 1.0, 3)} nats"
                )

            text = f"weight decay {fmt_wd(wd)}, **{method_style(method)[2]}**: "
            if lo is hi:
                text += f"width {fmt_width(float(lo['width']))}: {at(lo)}."
            else:
                text += (
                    f"width {fmt_width(float(lo['width']))}: {at(lo)}; width "
                    f"{fmt_width(float(hi['width']))}: {at(hi)}."
                )
            items.append(text)
    return items


def _files_read(res: Results) -> str:
    names = [
        n
        for n in (
            "study.json",
            "study.toml",
            "results.csv",
            "layers.csv",
            "moments.json",
            "spectra.json",
            "table1.csv",
            "stitch.csv",
            "planes.json",
        )
        if (res.path / n).exists()
    ]
    return f"Read from `{res.path}`: " + ", ".join(f"`{n}`" for n in names) + "."


# ---- the report -----------------------------------------------------------------------------
def build_blocks(res: Results, figs: Figures, *, quiet: bool = True) -> list[Block]:
    """The report's body (between its opening and its reproducibility section), each figure
    written by ``figs`` (:class:`lmc.report.page.Figures`). A study with curves (``[merge]
    paths``: rows whose ``path`` is not ``line``) has every section of the line read from its
    line rows, and a section "Curves beside the line" (:func:`curve_blocks`)."""
    full = res
    kinds = width_figures.path_kinds(full)
    if kinds != ["line"]:
        res = width_figures.path_results(full, "line")
    t1 = merge_table1(
        table1(res.rows), res.table1_rows, CALIBRATION_COLUMNS if res.undefined else ()
    )
    wds = res.weight_decays
    many_wd = len(wds) > 1

    # Render every figure first (with a progress bar), then lay them out.
    jobs: list[tuple[str, float | None, Callable]] = [
        (fn.__name__, wd, fn) for fn in width_figures.PER_WEIGHT_DECAY for wd in wds
    ]
    jobs.append(("weight_decay_ablation", None, width_figures.weight_decay_ablation))
    rendered: dict[tuple[str, float | None], width_figures.Plot | width_figures.Skip] = {}
    for name, wd, fn in progress(jobs, quiet=quiet, desc="figures"):
        rendered[(name, wd)] = fn(res) if wd is None else fn(res, wd)

    blocks: list[Block] = [Para(study_summary(res))]
    blocks.append(Para(_files_read(res)))
    blocks += [Note(n) for n in res.notes]

    blocks.append(Heading(2, "Summary"))
    items = headline(res, t1)
    if items:
        blocks.append(Para("Narrowest against widest width (details in Table 1 and the figures):"))
        blocks.append(Bullets(items))
    if len(res.widths) < 2:
        blocks.append(Note("Only one width was run, so figures against width are skipped."))
    if len(res.pairs) < 2:
        blocks.append(
            Note("Only one pair was run: no value has an interval and no comparison a verdict.")
        )
    elif len(res.pairs) < MIN_PAIRS:
        blocks.append(
            Note(
                f"Only {len(res.pairs)} pairs were run: intervals are wide (t with "
                f"{len(res.pairs) - 1} degree{'s' if len(res.pairs) > 2 else ''} of freedom) and "
                f"comparisons give no verdict (a verdict needs {MIN_PAIRS} pairs)."
            )
        )
    if res.undefined:
        blocks.append(
            Note(
                f"Calibration hit its bound in {len(res.undefined)} cells: their inverse "
                "temperature and calibrated loss are undefined and left out of every mean, "
                "table and figure (listed under Undefined values)."
            )
        )

    blocks.append(Heading(2, "Table 1: barriers at λ = ½"))
    blocks.append(
        Para(
            "As in the width paper's Table 1, at λ = ½, but with mean ± the half-width of its "
            "95 % t-interval over the pairs (n in column pairs; the paper's ± is a standard "
            "deviation); "
            + (f"width: {res.width_label}; " if res.width_label else "")
            + "accuracy in "
            "percent, the accuracy barrier ½(acc_A + acc_B) − acc(θ(½)) in percentage points "
            "(pp), loss barriers L(θ(½)) − ½(L_A + L_B) in nats (may be negative), β the fitted "
            "inverse temperature; undefined calibrations are left out of the means "
            "(see Undefined values). "
            + (
                "Values from `table1.csv`."
                if res.table1_rows
                else "Computed from `results.csv` (no `table1.csv`)."
            )
        )
    )
    asked = asked_pairs(res)
    for wd in wds:
        rows = [r for r in t1 if r["weight_decay"] == wd]
        if not rows:
            continue
        if many_wd:
            blocks.append(Heading(3, f"Table 1, weight decay {fmt_wd(wd)}"))
        blocks.append(
            table1_block(rows, f"{res.dataset} · {res.model} · weight decay {fmt_wd(wd)}", asked)
        )

    blocks += paired_blocks(res)
    blocks += undefined_values(res)
    if kinds != ["line"]:
        blocks += curve_blocks(full, figs, quiet=quiet)

    def section(heading: str, intro: str, name: str, level: int = 2) -> None:
        blocks.append(Heading(level, heading))
        if intro:
            blocks.append(Para(intro))
        for wd in wds:
            blocks.append(figs.block(rendered[(name, wd)]))

    blocks.append(Heading(2, "Merging against width"))
    section(
        "Accuracy",
        "Merged model θ(½) against the ensemble and the endpoints.",
        "accuracy_vs_width",
        3,
    )
    section(
        "Loss barriers",
        "Raw against calibrated barriers: a logit-scale mismatch raises the raw loss but not "
        "the calibrated one.",
        "barriers_vs_width",
        3,
    )
    section("Interpolation curves", "", "interpolation_curves")
    section(
        "Softmax temperature",
        "Under ideal LEWC the midpoint's logits are (½)^(L−1) times the ensemble's averaged "
        "logits, so its fitted β should approach 2^(L−1) times the ensemble's β.",
        "inverse_temperature",
    )
    section(
        "Layerwise connectivity",
        "LEWC, weak additivity of ReLU and reciprocal orthogonality, the width paper's "
        "sufficient conditions for the merged model to act as the ensemble.",
        "layer_cosines",
    )
    blocks += stitch_blocks(res, figs)
    blocks.append(Heading(2, "Low-rank structure"))
    section("Second moments", "", "second_moments", 3)
    section("Singular value spectra", "", "spectra", 3)
    blocks.append(Heading(2, "Weight-decay ablation"))
    blocks.append(figs.block(rendered[("weight_decay_ablation", None)]))

    return blocks


#: The per-path values of the curves' table: (results column, header, scale, digits).
CURVE_TABLE = (
    ("loss_barrier", "loss barrier, max (nats)", 1.0, 3),
    ("midpoint_loss_barrier", "loss barrier at ½ (nats)", 1.0, 3),
    ("accuracy_barrier", "accuracy barrier, max (pp)", 100.0, 2),
    ("bend_distance", "bend ‖θ_C − mid‖ / ‖θ_A − θ_B‖", 1.0, 3),
)


def _planes(res: Results) -> list[dict] | None:
    """``planes.json``'s records, or ``None`` when absent or unreadable."""
    import json

    path = res.path / "planes.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, list) else None


def curve_blocks(res: Results, figs: Figures, *, quiet: bool = True) -> list[Block]:
    """The section "Curves beside the line" of a study with ``[merge] paths``: per weight
    decay a table of each path's barriers (max over the path and at ½) and each curve's bend,
    mean ± 95 % t-interval over the pairs; each curve's loss barrier against the line's, paired
    by pair (:func:`lmc.stats.verdict`); the barriers against width; and the loss planes
    through A, B and the control points (``planes.json``)."""
    kinds = width_figures.path_kinds(res)
    curves = [k for k in kinds if k != "line"]
    by_kind = {k: width_figures.path_results(res, k) for k in kinds}
    planes = _planes(res)
    blocks: list[Block] = [Heading(2, "Curves beside the line")]
    blocks.append(
        Para(
            f"Besides the line, each pair's curve{'s' if len(curves) > 1 else ''} "
            f"({', '.join(curves)}) θ(t) (t = 0 is A, t = 1 is B, aligned to A by the method "
            "first) through a control point θ_C trained on the "
            "training split to minimise the expected loss along it (Garipov et al. 2018; "
            'docs/science.md, "Curves between two models"), evaluated on the same grid with '
            "the same calibration. A barrier along a path is the largest excess of its loss "
            "over the chord between the endpoints' losses (max over λ or t); at ½ it is the "
            "midpoint's. ± is the half-width of the mean's 95 % t-interval over the pairs."
        )
    )
    for wd in res.weight_decays:
        rows = []
        for method in res.methods:
            for width in res.widths:
                for kind in kinds:
                    sub = by_kind[kind]
                    if not sub.select(weight_decay=wd, method=method, width=width):
                        continue
                    cells = []
                    for column, _, scale, digits in CURVE_TABLE:
                        if column == "bend_distance" and kind == "line":
                            cells.append(DASH)
                            continue
                        values = width_figures.pair_values(
                            sub, column, weight_decay=wd, method=method, width=width
                        )
                        cell = summarize(values)
                        cells.append(fmt_pm(cell.mean, cell.half_width, scale, digits))
                    pairs = len(sub.select(weight_decay=wd, method=method, width=width, lam=0.5))
                    rows.append(
                        [fmt_width(float(width)), method_style(method)[2], kind, str(pairs), *cells]
                    )
        if rows:
            blocks.append(
                Table(
                    header=["width", "method", "path", "pairs", *(c[1] for c in CURVE_TABLE)],
                    rows=rows,
                    caption=f"{res.dataset} · {res.model} · weight decay {fmt_wd(wd)} · "
                    f"{TABLE1_STATISTIC}",
                    align=["r", "l", "l", "r"] + ["r"] * len(CURVE_TABLE),
                    wide=True,
                )
            )
        verdicts = []
        for method in res.methods:
            for width in res.widths:
                line = width_figures.pair_values(
                    by_kind["line"], "loss_barrier", weight_decay=wd, method=method, width=width
                )
                cells = []
                for kind in curves:
                    other = width_figures.pair_values(
                        by_kind[kind], "loss_barrier", weight_decay=wd, method=method, width=width
                    )
                    cells.append(verdict(compare(line, other)) if line and other else DASH)
                if any(c != DASH for c in cells):
                    verdicts.append([fmt_width(float(width)), method_style(method)[2], *cells])
        if verdicts:
            blocks.append(
                Table(
                    header=["width", "method", *(f"{k} − line" for k in curves)],
                    rows=verdicts,
                    caption="loss barrier along the path (max, nats): curve − line, paired by "
                    f"pair · weight decay {fmt_wd(wd)}",
                    align=["r", "l"] + ["l"] * len(curves),
                    wide=True,
                )
            )
        for plot in (width_figures.curves_vs_width(res, wd),
                     width_figures.curve_planes(res, planes, wd)):  # fmt: skip
            blocks.append(figs.block(plot))
    return blocks


def verdict_barrier(res: Results) -> tuple[str, str]:
    """(key, words) of the barrier the paired comparisons judge: the calibrated midpoint loss
    barrier where any is defined, else the raw one (as the Summary's headline)."""
    key = "calibrated_midpoint_loss_barrier"
    if any(_ok(r.get(key)) for r in res.rows):
        return key, "calibrated midpoint loss barrier (nats)"
    return "midpoint_loss_barrier", "midpoint loss barrier (nats)"


def paired_blocks(res: Results) -> list[Block]:
    """The "Paired comparisons" section: :func:`lmc.stats.verdict` on the per-pair barrier
    (:func:`verdict_barrier`; values per pair from :func:`lmc.report.figures.pair_values`) of
    each method against ``none`` per weight decay and width, of the widest against the
    narrowest width per weight decay and method, and of each weight decay against the first
    (strongest) per width and method. Pair p is one key throughout: its runs share their seeds
    across widths and weight decays, and every method aligns the same two runs. Nothing when
    there is nothing to compare (one method or no ``none``, one width and one weight decay)."""
    key, words = verdict_barrier(res)
    cache: dict[tuple, dict[int, float]] = {}

    def cell(wd: float, method: str, width: float) -> dict[int, float]:
        at = (wd, method, width)
        if at not in cache:
            cache[at] = width_figures.pair_values(
                res, key, weight_decay=wd, method=method, width=width
            )
        return cache[at]

    def judged(first: dict[int, float], second: dict[int, float]) -> str:
        return verdict(compare(first, second)) if first and second else DASH

    wds, widths = res.weight_decays, res.widths
    others = [m for m in res.methods if m != "none"]
    body: list[Block] = []
    if "none" in res.methods and others:
        body.append(Heading(3, "Alignment against no alignment"))
        for wd in wds:
            rows = [
                [fmt_width(float(w))]
                + [judged(cell(wd, "none", w), cell(wd, m, w)) for m in others]
                for w in widths
            ]
            body.append(
                Table(
                    header=["width"] + [f"{method_style(m)[2]} − no permutation" for m in others],
                    rows=rows,
                    caption=f"{words}: method − none, paired · weight decay {fmt_wd(wd)}",
                    align=["r"] + ["l"] * len(others),
                    wide=True,
                )
            )
    if len(widths) > 1:
        lo, hi = widths[0], widths[-1]
        body.append(Heading(3, "Widest against narrowest width"))
        body.append(
            Table(
                header=[
                    "weight decay",
                    "method",
                    f"width {fmt_width(float(hi))} − width {fmt_width(float(lo))}",
                ],
                rows=[
                    [fmt_wd(wd), method_style(m)[2], judged(cell(wd, m, lo), cell(wd, m, hi))]
                    for wd in wds
                    for m in res.methods
                ],
                caption=f"{words}: widest − narrowest width, paired",
                align=["r", "l", "l"],
                wide=True,
            )
        )
    if len(wds) > 1:
        body.append(Heading(3, "Weight decay"))
        body.append(
            Table(
                header=["width", "method"]
                + [f"weight decay {fmt_wd(wd)} − {fmt_wd(wds[0])}" for wd in wds[1:]],
                rows=[
                    [fmt_width(float(w)), method_style(m)[2]]
                    + [judged(cell(wds[0], m, w), cell(wd, m, w)) for wd in wds[1:]]
                    for w in widths
                    for m in res.methods
                ],
                caption=f"{words}: each weight decay − {fmt_wd(wds[0])}, paired",
                align=["r", "l"] + ["l"] * (len(wds) - 1),
                wide=True,
            )
        )
    if not body:
        return []
    intro = Para(
        f"Differences of the {words} at λ = ½, second − first, compared pair by pair: pair p "
        "is trained from the same seeds (the study's `seed` and p) at every width and weight "
        "decay, and every method aligns the same two runs, so each difference is taken within "
        "a pair. Each cell gives the mean of the per-pair differences ± the half-width of its "
        "95 % t-interval and the paired t-test's p. The verdict names a difference (**higher** "
        "or **lower**, in how many pairs) only where that interval excludes 0; otherwise it "
        "reads **no difference detected** and says how large a difference the interval still "
        f"admits; below {MIN_PAIRS} pairs it reads **too few pairs: no verdict** "
        "(docs/science.md, Statistics and verdicts)."
    )
    return [Heading(2, "Paired comparisons"), intro, *body]


def undefined_values(res: Results) -> list[Block]:
    """The "Undefined values" section: where and how often calibration hit the bound of its β
    search (``Results.undefined``), one table row per (weight decay, width, method, pair,
    model) with its λ; nothing when calibration was off."""
    if not res.calibrated:
        return []
    blocks: list[Block] = [Heading(2, "Undefined values")]
    cells = res.undefined
    scored = 2 * sum(
        1
        for r in res.rows
        if any(_ok(r.get(k)) for k in ("calibrated_loss", "calibration_at_bound"))
    )
    if not cells:
        blocks.append(
            Para(
                f"No calibration hit the bound of its β search: all {scored} inverse "
                "temperatures and calibrated losses (merged models and ensembles) are defined."
            )
        )
        return blocks
    merged = sum(c["model"] == "merged" for c in cells)
    advice = (
        ' Cross-fitted calibration (`calibration = "crossfit"`, which `auto` picks for small '
        "splits) fits each β on (K − 1)/K of the split and makes this rarer."
        if any(m == "split" for m, _ in res.calibrations)
        else ""
    )
    blocks.append(
        Para(
            f"Calibration hit the bound of its β search in **{len(cells)}** of {scored} "
            f"calibrated cells ({merged} merged models θ(λ), {len(cells) - merged} ensembles), "
            "typically because the examples a β was fitted on were all classified correctly, so "
            "that no finite β minimises their cross-entropy. There the inverse temperature and "
            "the calibrated loss are "
            "undefined: they are left out of every mean, table and figure of this report and "
            "of `table1.csv`, a calibrated barrier that needs one of them is undefined too, "
            f"and Table 1 counts the pairs concerned.{advice}"
        )
    )
    groups: dict[tuple, list[float]] = {}
    for c in cells:
        key = (c["weight_decay"], c["width"], c["method"], c["pair"], c["model"])
        groups.setdefault(key, []).append(c["lam"])
    rows = [
        [
            fmt_wd(wd),
            fmt_width(float(width)),
            method_style(method)[2],
            str(pair),
            "merged θ(λ)" if model == "merged" else "ensemble",
            ", ".join(f"{v:g}" for v in sorted(lams)),
            str(len(lams)),
        ]
        for (wd, width, method, pair, model), lams in sorted(
            groups.items(),
            key=lambda g: (-g[0][0], g[0][1], method_sort_key(g[0][2]), g[0][3], g[0][4]),
        )
    ]
    blocks.append(
        Table(
            header=["weight decay", "width", "method", "pair", "model", "λ", "cells"],
            rows=rows,
            caption="Cells whose calibration is undefined (β on the bound of its search)",
            align=["r", "r", "l", "r", "l", "l", "r"],
        )
    )
    return blocks


def default_title(res: Results) -> str:
    name = res.study.get("name")
    base = f"Linear mode connectivity: {res.dataset} · {res.model}"
    return f"{base} ({name})" if name else base


def width_page(folder: Path, title: str | None = None, quiet: bool = True) -> Page:
    """The width study's report of the results folder ``folder``: the text, Table 1 and the
    figures (print-resolution PNGs, an SVG of each beside it).

    Reads only the files ``lmc.experiments`` writes (``results.csv`` required; ``study.json``,
    ``study.toml``, ``layers.csv``, ``moments.json``, ``spectra.json``, ``table1.csv``,
    ``stitch.csv`` optional): never trains or evaluates. Figures that lack inputs are
    replaced by a note; a folder without ``results.csv`` is an ``LmcError``. ``title``
    defaults to one made from the dataset, the model and the study's name; ``quiet``: no
    progress bar while the figures render."""
    res = load_results(folder)
    title = title or default_title(res)
    body = partial(build_blocks, res, quiet=quiet)
    return Page(title, body, res.study, res.path, res.toml)
