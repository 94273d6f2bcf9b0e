"""The report of a merge-many study (``experiment = "merge-many"``; Git Re-Basin §5.4, App. A.10).

Reads ``study.json``, ``models.csv``, ``reliability.csv`` and ``study.toml`` (optional) of a
folder written by :mod:`lmc.experiments.merge_many_study` and writes ``report.md``,
``report.html`` and figures: per set, the merged models against each model, the models'
ensemble and the reference model (trained on all the data) in test loss (nats), accuracy and
ECE, a bar figure of them, the merge methods compared paired over sets, and reliability
diagrams. Never computes a model.

Conventions (:mod:`lmc.stats`, docs/science.md "Statistics and verdicts"): the models of a set
are shown as their mean ± the half-width of its 95 % t-interval over the set's models (t with
n − 1 degrees of freedom; one model: no interval), in tables and in the bars' error bars; a
merge, the ensemble and the reference are one evaluation each (no interval). Methods are
compared **paired over sets**: a pair is a set (the same models merged by every method, with
their ensemble and their mean), the difference is b − a (the merge minus its baseline), test
loss in nats and test accuracy in percentage points (fractions × 100), and the verdict is
:func:`lmc.stats.verdict`'s. Only sets that repeat one condition independently are paired
(their ``[[sets]]`` entries equal but for ``name`` and ``seed``, their models' seeds not
overlapping: :func:`repeats`), each such group on its own.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from lmc import stats
from lmc.config import LmcError
from lmc.perm.methods import get_method
from lmc.stats import Cell, compare, summarize

from .document import Block, Bullets, Heading, Para, Table
from .figures import Plot
from .page import DASH, Figures, Page, read_record
from .results import read_csv
from .style import REFERENCE, finish_axes, method_style, new_figure, render

METRICS = (
    ("test_accuracy", "accuracy (%)", 100.0),
    ("test_loss", "loss (nats)", 1.0),
    ("test_ece", "ECE (%)", 100.0),
)
#: The quantities compared paired over sets: (column, words, scale: 100 for percentage points).
COMPARED = (
    ("test_loss", "test loss (nats)", 1.0),
    ("test_accuracy", "test accuracy (percentage points)", 100.0),
)
#: The label of the set's models among the compared entries.
MODELS = "models"
#: Columns of the comparison, in order: (label, colour).
ENTRY_COLOURS = {
    MODELS: "#999999",
    "ensemble": "#009E73",
    "reference": REFERENCE,
}
#: The merges with a scheme of their own in a merge-many study (every other method aligns
#: canonical forms onto model 0's: :func:`lmc.merge.many.merge_many_canonical`).
OWN_MERGES = {
    "none": "the plain average of the models' weights as they are",
    "weight": "Git Re-Basin's merge-many (App. A.10): every model permuted by weight matching "
    "onto the mean of the others, round after round, until no permutation changes (at most "
    "`max_rounds` rounds; the set's table says whether it converged); then averaged",
}
#: What the canonical control does to a set (it aligns nothing)
CONTROL = "every model put in its canonical form (the same function), not aligned, then averaged"


def _entries(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """The set's compared entries in order: the models (one entry, all rows), the ensemble,
    each merge, the reference."""
    models = [r for r in rows if r["role"] == "model"]
    out = [(MODELS, models)]
    out += [("ensemble", [r]) for r in rows if r["role"] == "ensemble"]
    merged = sorted((r for r in rows if r["role"] == "merged"), key=lambda r: r["method"] != "none")
    out += [(f"merged ({r['method']})", [r]) for r in merged]
    out += [("reference", [r]) for r in rows if r["role"] == "reference"]
    return out


def _colour(label: str) -> str:
    if label.startswith("merged ("):
        return method_style(label[len("merged (") : -1])[0]
    return ENTRY_COLOURS.get(label, "#000000")


def _sets(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for row in rows:
        out.setdefault(str(row["set"]), []).append(row)
    return out


def _fmt(value: float, scale: float, digits: int) -> str:
    return f"{scale * value:.{digits}f}" if math.isfinite(value) else "–"


def _digits(scale: float) -> int:
    return 3 if scale == 1.0 else 2


def _models_label(n: int) -> str:
    if n < 2:
        return f"models (n = {n}, no interval)"
    return f"models (mean ± 95 % interval, n = {n})"


def _cell_text(cell: Cell, scale: float, digits: int) -> str:
    """``mean ± h`` of a cell after scaling, both to ``digits`` places (one format per table
    column); the mean alone without an interval (one value)."""
    text = _fmt(cell.mean, scale, digits)
    if cell.n > 1 and math.isfinite(cell.half_width):
        text += f" ± {_fmt(cell.half_width, scale, digits)}"
    return text


def set_table(name: str, rows: list[dict], entry: dict[str, Any]) -> Table:
    """The set's entries (:func:`_entries`) and each model: the models' row is their mean ±
    the half-width of its 95 % t-interval (:func:`lmc.stats.summarize`)."""
    body = []
    for label, group in _entries(rows):
        cells = [_models_label(len(group)) if label == MODELS else label]
        for column, _, scale in METRICS:
            cells.append(_cell_text(summarize(r[column] for r in group), scale, _digits(scale)))
        extra = ""
        rounds = group[0].get("rounds") if label == "merged (weight)" else None
        if isinstance(rounds, (int, float)) and math.isfinite(rounds):
            extra = f"{int(rounds)} rounds" + (
                "" if str(group[0].get("converged")) == "True" else ", not converged"
            )
        cells.append(extra)
        body.append(cells)
    for r in (r for r in rows if r["role"] == "model"):
        cells = [f"model {int(r['index'])} ({int(r['train_examples'])} examples)"]
        cells += [_fmt(r[c], s, _digits(s)) for c, _, s in METRICS]
        body.append([*cells, ""])
    return Table(
        ["model", "test accuracy (%)", "test loss (nats)", "ECE (%)", "alignment"],
        body,
        caption=f"Set `{name}`: {_describe(entry)}. Values from `models.csv`; the models' row: "
        "mean ± the half-width of its 95 % t-interval over the set's models; every other row "
        "is one evaluation.",
        align=["l", "r", "r", "r", "l"],
    )


def _describe(entry: dict[str, Any]) -> str:
    n = entry.get("models", "?")
    subset = entry.get("subset", "all")
    if subset == "random":
        share = f"{entry.get('train_fraction', 0):.0%}"
        return f"{n} models, each on its own random {share} of the training split"
    if subset == "labels":
        parts = entry.get("label_parts")
        return f"{n} models on disjoint training subsets chosen by label (`label_parts` {parts})"
    return f"{n} models of different seeds, each on the same training data"


def _where(value: float, models: list[float]) -> str:
    """Where one value lies among the models' values: above or below every one, or within
    their range (descriptive: one evaluation, no interval)."""
    if not models or not math.isfinite(value):
        return ""
    if value > max(models):
        return "above every model"
    if value < min(models):
        return "below every model"
    return "within the models' range"


def verdict(name: str, rows: list[dict], split: str = "test") -> str:
    """One sentence per set, from the recorded numbers: the models' mean test accuracy with
    its 95 % interval and range, then each other entry's accuracy and ECE and where it lies
    among the models' accuracies. Descriptive only: one set, one evaluation per merge; the
    methods are judged across sets in "Methods compared, paired over sets"."""
    by = dict(_entries(rows))
    accs = [r["test_accuracy"] for r in by.get(MODELS, []) if math.isfinite(r["test_accuracy"])]
    cell = summarize(accs)
    if cell.n == 0:
        parts = [f"`{name}`: no model accuracy recorded"]
    else:
        mean = _cell_text(cell, 100.0, 1)
        if cell.n == 1:
            parts = [f"`{name}`: the one model with an accuracy reaches {mean} % test accuracy"]
        else:
            spread = f"from {100 * min(accs):.1f} % to {100 * max(accs):.1f} %"
            parts = [f"`{name}`: the {cell.n} models with an accuracy reach {mean} % test "
                     f"accuracy on average (95 % interval; {spread})"]  # fmt: skip
    for label in (label for label in by if label != MODELS):
        r = by[label][0]
        where = _where(r["test_accuracy"], accs)
        parts.append(
            f"{label} {_fmt(r['test_accuracy'], 100.0, 1)} % "
            f"(ECE {_fmt(r['test_ece'], 100.0, 1)} %)" + (f", {where}" if where else "")
        )
    others = "the ensemble and the reference" if "reference" in by else "the ensemble"
    return (
        "; ".join(parts) + f". Each merge and {others} are one evaluation on the {split} split, "
        "with no interval."
    )


# ---- methods ----------------------------------------------------------------------------------
def study_methods(config: dict[str, Any], rows: list[dict]) -> list[str]:
    """The merge methods the study ran (those of the merged rows), in the order of
    ``merge_many.methods`` of ``study.json``'s config, then any other (``none`` first)."""
    seen = [str(r["method"]) for r in rows if r["role"] == "merged"]
    seen.sort(key=lambda m: m != "none")
    listed = [str(m) for m in config.get("merge_many", {}).get("methods", []) if m in seen]
    return list(dict.fromkeys([*listed, *seen]))


def method_text(name: str) -> str:
    """What the merge ``name`` does, from the alignment method's registry record
    (:mod:`lmc.perm.methods`: ``label``, ``description``); ``none`` (the plain average) and
    ``weight`` (merge-many) merge by a scheme of their own."""
    try:
        record = get_method(name)
    except LmcError:
        record = None
    label = record.label if record is not None else name
    head = f"`{name}` ({label})" if label != name else f"`{name}`"
    if name in OWN_MERGES:
        return f"{head}: {OWN_MERGES[name]}"
    if record is None:
        return f"{head}: not a registered alignment method here, so its record is unknown"
    if name == "canonical":
        how = CONTROL
    elif record.canonical:
        how = (
            "every model put in its canonical form and aligned onto model 0's by this method, "
            "then averaged (a canonical-form model)"
        )
    else:
        how = "every model aligned onto model 0 by this method, then averaged"
    described = (
        f"the method, as its record describes it for a pair (B onto A): {record.description}"
    )
    return f"{head}: {how}; {described}"


def method_blocks(methods: list[str], split: str, ece_bins: Any, reference: bool) -> list[Block]:
    """The paragraph that says how each set was merged and compared, one item per method the
    study ran (:func:`method_text`)."""
    what = (
        "the models, their ensemble (averaged logits) and a reference model trained on all the data"
        if reference
        else "the models and their ensemble (averaged logits)"
    )
    count = f"{len(methods)} method{'s' if len(methods) != 1 else ''}"
    intro = Para(
        f"Each set's models are merged by {count}, and each merge is compared with {what}, "
        f"on the {split} split; ECE over {ece_bins} equal-width confidence bins. The models "
        "of a set are shown as their mean ± the half-width of its 95 % t-interval over the "
        "set's models (t with n − 1 degrees of freedom); a merge, the ensemble"
        + (" and the reference are" if reference else " are")
        + " one evaluation each. The methods:"
    )
    return [intro, Bullets([method_text(m) for m in methods])]


# ---- methods compared, paired over sets -------------------------------------------------------
def _seeds(entry: dict[str, Any], study_seed: Any) -> range | None:
    """The seeds of a set's models: ``seed`` (else the study's) + i for model i
    (:func:`lmc.experiments.merge_many_study.set_seed`); ``None`` where unknown."""
    seed, models = entry.get("seed", study_seed), entry.get("models")
    if not isinstance(seed, int) or not isinstance(models, int):
        return None
    return range(seed, seed + models)


def repeats(
    sets: dict[str, list[dict]], entries: dict[str, dict[str, Any]], study_seed: Any = None
) -> tuple[list[list[str]], list[list[str]]]:
    """``(groups, unpaired)``: the sets grouped into independent repeats of one condition, in
    order, and the groups that cannot be paired. Repeats are sets whose ``[[sets]]`` entries
    are equal but for ``name`` and ``seed`` and whose models' seeds (``seed`` + i, the study's
    ``seed`` where a set gives none) do not overlap: sets that share models are not
    independent, so such a group goes to ``unpaired``, as do sets without a recorded entry
    (their condition cannot be checked)."""
    groups: dict[str, list[str]] = {}
    unpaired: list[list[str]] = []
    loose = [name for name in sets if name not in entries]
    for name in sets:
        entry = entries.get(name)
        if entry is None:
            continue
        key = json.dumps({k: v for k, v in entry.items() if k not in ("name", "seed")},
                         sort_keys=True)  # fmt: skip
        groups.setdefault(key, []).append(name)
    paired = []
    for names in groups.values():
        seeds = [_seeds(entries[n], study_seed) for n in names]
        known = all(r is not None for r in seeds)
        overlap = not known or any(
            set(a) & set(b) for i, a in enumerate(seeds) for b in seeds[i + 1 :]
        )
        (unpaired if overlap and len(names) > 1 else paired).append(names)
    if loose:
        unpaired.append(loose)
    return paired, unpaired


def _per_set(
    sets: dict[str, list[dict]], names: list[str], label: str, column: str, scale: float
) -> dict[str, float]:
    """set name -> the entry's ``column`` × ``scale`` (the models: their mean) over ``names``;
    sets without the entry, or without a finite value, are left out."""
    out = {}
    for name in names:
        group = dict(_entries(sets[name])).get(label, [])
        value = summarize(r[column] for r in group).mean if group else math.nan
        if math.isfinite(value):
            out[name] = scale * value
    return out


def _judged(first: dict[str, float], second: dict[str, float]) -> str:
    """:func:`lmc.stats.verdict` on second − first, paired by set; a dash without a shared
    set."""
    if not any(k in second for k in first):
        return DASH
    return stats.verdict(compare(first, second))


def paired_blocks(
    sets: dict[str, list[dict]],
    entries: dict[str, dict[str, Any]],
    methods: list[str],
    study_seed: Any = None,
) -> list[Block]:
    """The "Methods compared, paired over sets" section: for test loss (nats) and test accuracy
    (percentage points), each merge against the plain average (``none``, where it ran), the
    set's models' mean and the set's ensemble, b − a with :func:`lmc.stats.compare` keyed by set
    name, within each group of repeated sets (:func:`repeats`); ``methods``: those that ran
    (:func:`study_methods`). Nothing without a merge."""
    if not methods:
        return []
    groups, unpaired = repeats(sets, entries, study_seed)
    body: list[Block] = []
    for names in unpaired:
        listed = ", ".join(f"`{n}`" for n in names)
        why = (
            "no `[[sets]]` entry in study.json, so whether they repeat one condition cannot be "
            "checked"
            if all(n not in entries for n in names)
            else "models that may be in common (their seeds overlap, or are not recorded), so they "
            "are not independent repeats"
        )
        body.append(Para(f"Sets {listed}: {why}; not compared."))
    for names in groups:
        listed = ", ".join(f"`{n}`" for n in names)
        if len(groups) + len(unpaired) > 1:
            body.append(Heading(3, f"Sets {listed}" if len(names) > 1 else f"Set {listed} alone"))
        if len(names) < stats.MIN_PAIRS:  # every comparison: too few pairs
            sets_word = "Sets" if len(names) > 1 else "Set"
            body.append(
                Para(
                    f"{sets_word} {listed}, every merge against every baseline: "
                    f"{stats.too_few(len(names))}. Repeat the set with its own `seed` (a new "
                    f"`[[sets]]` entry) to reach {stats.MIN_PAIRS} sets."
                )
            )
            continue
        for column, words, scale in COMPARED:
            baselines = [(MODELS, "merge − the models' mean"), ("ensemble", "merge − ensemble")]
            if "none" in methods:
                baselines.insert(0, ("merged (none)", "merge − none (plain average)"))
            cells = {
                label: _per_set(sets, names, label, column, scale)
                for label in [label for label, _ in baselines] + [f"merged ({m})" for m in methods]
            }
            baselines = [(label, head) for label, head in baselines if cells[label]]
            if not baselines:
                continue
            rows = []
            for m in methods:
                mine = cells[f"merged ({m})"]
                rows.append(
                    [f"merged ({m})"]
                    + [
                        DASH
                        if label == f"merged ({m})" or not mine
                        else _judged(cells[label], mine)
                        for label, _ in baselines
                    ]
                )
            body.append(
                Table(
                    header=["merge", *(head for _, head in baselines)],
                    rows=rows,
                    caption=f"{words}: merge − baseline, paired by set · sets {listed}",
                    align=["l"] + ["l"] * len(baselines),
                    wide=True,
                )
            )
    if not body:
        return []
    intro = Para(
        "Each merge's test loss (nats) and test accuracy (percentage points) against the plain "
        "average (`none`, where the study ran it), the set's models' mean and the set's "
        "ensemble, merge − baseline, compared set by set: here a pair is a set, the same models "
        "merged by every method, so each difference is taken within a set (lower loss and "
        "higher accuracy are better). Only sets that repeat one condition independently are "
        "paired: their `[[sets]]` entries are equal but for `name` and `seed`, and their "
        "models' seeds do not overlap. Each cell gives the mean of the "
        "per-set differences ± the half-width of its 95 % t-interval and the paired t-test's p. "
        "The verdict names a difference (**higher** or **lower**, in how many pairs: sets) only "
        "where that interval excludes 0; otherwise it reads **no difference detected** and says "
        f"how large a difference the interval still admits; below {stats.MIN_PAIRS} sets it "
        f'reads **too few pairs** ("{stats.too_few(2)}" for 2 sets) (docs/science.md, '
        "Statistics and verdicts)."
    )
    return [Heading(2, "Methods compared, paired over sets"), intro, *body]


# ---- figures ----------------------------------------------------------------------------------
def _bars(sets: dict[str, list[dict]], title: str, methods: list[str], reference: bool) -> Plot:
    fig, axes = new_figure(1, len(METRICS), panel=(max(3.6, 1.2 * len(sets) + 2.2), 3.4))
    labels = list(dict.fromkeys(label for rows in sets.values() for label, _ in _entries(rows)))
    width = 0.8 / max(len(labels), 1)
    positions = np.arange(len(sets))
    for ax, (column, name, scale) in zip(axes[0], METRICS):
        for j, label in enumerate(labels):
            means, halves = [], []
            for rows in sets.values():
                cell = summarize(r[column] for r in dict(_entries(rows)).get(label, []))
                means.append(scale * cell.mean)
                half = cell.half_width if cell.n > 1 else math.nan
                halves.append(scale * half if math.isfinite(half) else 0.0)
            ax.bar(
                positions + (j - (len(labels) - 1) / 2) * width,
                means,
                width,
                yerr=halves if any(halves) else None,
                color=_colour(label),
                label="models (mean ± 95 % interval)" if label == MODELS else label,
                capsize=2,
            )
        ax.set_xticks(positions, list(sets))
        ax.set_ylabel(name)
        finish_axes(ax)
    axes[0][-1].legend(frameon=False, fontsize=7.5)
    fig.suptitle(title, fontsize=10)
    caption = (
        "Test accuracy, loss (nats) and expected calibration error per set: the models "
        "(mean, error bar ± the half-width of its 95 % t-interval over the set's models, t with "
        "n − 1 degrees of freedom), their ensemble (averaged logits), the merges ("
        + ", ".join(f"`{m}`" for m in methods)
        + ": see the methods above)"
        + (" and the reference model trained on the whole training split" if reference else "")
        + "; every bar but the models' is one evaluation."
    )
    return Plot("merge_many", "Merged models against their inputs", caption, render(fig))


def _curve(rows: list[dict]):
    from lmc.metrics import ReliabilityCurve

    rows = sorted(rows, key=lambda r: r["bin"])
    edges = np.array([rows[0]["lower"], *(r["upper"] for r in rows)], dtype=float)
    return ReliabilityCurve(
        edges=edges,
        counts=np.array([int(r["count"]) for r in rows]),
        confidence=np.array([r["confidence"] for r in rows], dtype=float),
        accuracy=np.array([r["accuracy"] for r in rows], dtype=float),
    )


def _reliability(curves: list[dict], sets: list[str]) -> Plot | None:
    from lmc.metrics import draw_reliability_diagram

    wanted = ("model 0", "ensemble", "merged (weight)", "merged (none)", "reference")
    by: dict[tuple[str, str], list[dict]] = {}
    for r in curves:
        by.setdefault((str(r["set"]), str(r["label"])), []).append(r)
    columns = [w for w in wanted if any((s, w) in by for s in sets)]
    if not columns:
        return None
    fig, axes = new_figure(len(sets), len(columns), panel=(2.9, 2.9))
    for i, name in enumerate(sets):
        for j, label in enumerate(columns):
            ax = axes[i][j]
            if (name, label) not in by:
                ax.set_axis_off()
                continue
            draw_reliability_diagram(ax, _curve(by[(name, label)]))
            ax.set_title(f"{name}: {label}\n{ax.get_title()}", fontsize=7.5)
            ax.legend().set_visible(i == 0 and j == 0)
    caption = (
        "Reliability diagrams (equal-width confidence bins): per-bin accuracy against the "
        "bin's mean confidence, the hatched gap to it, the diagonal of perfect calibration; "
        "each panel's title gives its ECE."
    )
    return Plot("reliability", "Reliability diagrams", caption, render(fig))


def merge_many_page(folder: Path, title: str | None = None, quiet: bool = True) -> Page:
    """The merge-many study's report of the results folder ``folder`` (module docstring), as
    :func:`lmc.report.write_report` writes it."""
    record, toml = read_record(folder, ("models.csv", "reliability.csv"))
    rows = read_csv(folder / "models.csv")
    if not rows:
        raise LmcError(f"{folder / 'models.csv'} has no rows")
    sets = _sets(rows)
    config = record.get("config", {})
    entries = {e.get("name"): e for e in config.get("sets", [])}
    data, model = config.get("data", {}), config.get("model", {})
    settings = config.get("merge_many", {})
    width = settings.get("width", "?")
    where = f"{data.get('dataset', '?')} · {model.get('name', '?')} (width {width})"
    title = title or f"Merging many models: {where} ({record.get('name', 'merge-many')})"

    methods = study_methods(config, rows)
    reference = any(r["role"] == "reference" for r in rows)
    split = data.get("split", "test")
    method = method_blocks(methods, split, settings.get("ece_bins", "?"), reference)

    def body(figures: Figures) -> list[Block]:
        blocks: list[Block] = [*method, Heading(2, "Summary")]
        blocks += [Para(verdict(name, set_rows, split)) for name, set_rows in sets.items()]
        blocks.append(figures.block(_bars(sets, where, methods, reference)))
        blocks += paired_blocks(sets, entries, methods, settings.get("seed"))
        blocks.append(Heading(2, "Sets"))
        for name, set_rows in sets.items():
            blocks.append(Heading(3, f"Set `{name}`"))
            blocks.append(set_table(name, set_rows, entries.get(name, {})))
        curves = read_csv(folder / "reliability.csv")
        plot = _reliability(curves, list(sets))
        if plot is not None:
            blocks.append(Heading(2, "Calibration"))
            blocks.append(figures.block(plot))
        return blocks

    return Page(title, body, record, folder, toml)
