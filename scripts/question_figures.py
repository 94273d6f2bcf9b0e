"""Figures and numbers for the width paper's reviewer questions, from committed study results.

Each subcommand reads the results folder(s) a recipe wrote (results.csv, table1.csv,
layers.csv), draws one figure (PNG, 200 dpi) and prints the numbers the README quotes, so every
number there can be re-derived from the committed files:

    python scripts/question_figures.py random      RESULTS_DIR  OUT.png
        calibrated midpoint barrier against width for none / weight / random merges
        (recipe question-random-permutations)
    python scripts/question_figures.py logit-norm  RESULTS_DIR  OUT.png
        the merged model's mean logit norm at lambda = 1/2 over the LEWC prediction
        E||(1/2)^L (f_A + f_B)|| against width (layers.csv, kind = logits)
    python scripts/question_figures.py weak-additivity  RESULTS_DIR  OUT.png
        Theorem 5.4's cosine cos(relu(u + v), relu(u) + relu(v)) measured on the real
        pre-activations of each hidden layer (weak_additivity_cosine, lambda = 1/2) against
        width, beside the Gaussian limit (3/4 + 1/pi) / sqrt(1 + 1/pi) = 0.930

    python scripts/question_figures.py depth        RESULTS_DIR  OUT.png
        a study with depth variants (recipe question-depth): the midpoint's inverse
        temperature over the ensemble's against depth, beside LEWC's 2^(L-1) = 2^depth, and
        the merged logit norm over its LEWC prediction
    python scripts/question_figures.py activations  RESULTS_DIR  OUT.png
        a study with activation variants (recipe question-activations): the calibrated
        midpoint barrier, the logits' LEWC cosine and the mean weak-additivity cosine of the
        hidden layers against width, per activation

Only unpermuted merges (method none) enter the logit-norm and weak-additivity figures: the
quantities compare A's and B's units as they are, which is the width paper's setting.
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from lmc.analysis.theory import GAUSSIAN_RELU_LIMIT
from lmc.experiments import read_csv
from lmc.experiments.cells import number
from lmc.metrics.figures import new_figure, save_figure

METHOD_LABELS = {
    "none": "no permutation",
    "weight": "weight matching",
    "random": "random permutation",
}
METHOD_STYLES = {"none": ("C0", "-", "o"), "weight": ("C1", "--", "s"), "random": ("C3", ":", "^")}


def _mean_std(values: list[float]) -> tuple[float, float]:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return math.nan, math.nan
    # the sample standard deviation, as table1.csv reports it (0 for one value)
    return float(np.mean(finite)), float(np.std(finite, ddof=1)) if len(finite) > 1 else 0.0


def _errorbar(ax, xs, stats: list[tuple[float, float]], **style) -> None:
    """Means with their standard deviations as error bars."""
    ax.errorbar(xs, [m for m, _ in stats], yerr=[s for _, s in stats], capsize=3, **style)


def _grouped(rows, key, value) -> dict:
    """{key(row): [value(row), ...]} over the rows."""
    out: dict = defaultdict(list)
    for r in rows:
        out[key(r)].append(value(r))
    return out


def random_permutations(results: Path, out: Path) -> None:
    rows = [r for r in read_csv(results / "results.csv") if number(r["lam"]) == 0.5]
    groups = _grouped(
        rows,
        lambda r: (r["method"], number(r["width"])),
        lambda r: (number(r["calibrated_midpoint_loss_barrier"]), number(r["accuracy"])),
    )
    fig, axes = new_figure(1, 2, panel=(4.6, 3.4))
    for method in ("none", "weight", "random"):
        widths = sorted(w for m, w in groups if m == method)
        if not widths:
            continue
        barrier = [_mean_std([b for b, _ in groups[(method, w)]]) for w in widths]
        accuracy = [_mean_std([100 * a for _, a in groups[(method, w)]]) for w in widths]
        color, line, marker = METHOD_STYLES[method]
        for ax, series in zip(axes[0], (barrier, accuracy)):
            _errorbar(
                ax,
                widths,
                series,
                color=color,
                linestyle=line,
                marker=marker,
                label=METHOD_LABELS[method],
            )
        cells = ", ".join(
            f"{w:g}: {b[0]:.3f} ± {b[1]:.3f} nats / {a[0]:.1f} %"
            for w, b, a in zip(widths, barrier, accuracy)
        )
        print(f"{method}: calibrated midpoint barrier / merged accuracy by width: {cells}")
    ylabels = ("calibrated midpoint loss barrier (nats)", "merged accuracy (%)")
    for ax, label in zip(axes[0], ylabels):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("width (hidden units per layer)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0, 0].axhline(0.0, color="0.5", linewidth=0.8)
    axes[0, 0].legend(fontsize=7)
    save_figure(fig, out, ("png",))


def _logits_rows(results: Path) -> list[dict]:
    return [
        r
        for r in read_csv(results / "layers.csv")
        if r["kind"] == "logits" and r["method"] == "none" and number(r["lam"]) == 0.5
    ]


def logit_norm(results: Path, out: Path) -> None:
    rows = _logits_rows(results)
    groups = _grouped(
        rows,
        lambda r: (number(r["weight_decay"]), number(r["width"])),
        lambda r: number(r["logit_norm"]) / number(r["logit_norm_lewc"]),
    )
    fig, axes = new_figure(1, 1, panel=(5.4, 3.6))
    ax = axes[0, 0]
    for i, wd in enumerate(sorted({wd for wd, _ in groups}, reverse=True)):
        widths = sorted(w for d, w in groups if d == wd)
        stats = [_mean_std(groups[(wd, w)]) for w in widths]
        _errorbar(ax, widths, stats, color=f"C{i}", marker="o", label=f"weight decay {wd:g}")
        cells = ", ".join(f"{w:g}: {m:.3f} ± {s:.3f}" for w, (m, s) in zip(widths, stats))
        print(f"wd {wd:g}: merged logit norm / LEWC prediction at lambda 1/2 by width: {cells}")
    ax.axhline(1.0, color="k", linewidth=0.9, linestyle="--", label="LEWC holds exactly")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("width (hidden units per layer)")
    ax.set_ylabel(r"$E\|f(\theta_{1/2})\| \;/\; E\|(1/2)^L (f_A + f_B)\|$")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save_figure(fig, out, ("png",))


def weak_additivity(results: Path, out: Path) -> None:
    rows = [
        r
        for r in read_csv(results / "layers.csv")
        if r["kind"] != "logits"
        and r["method"] == "none"
        and number(r["lam"]) == 0.5
        and math.isfinite(number(r.get("weak_additivity_cosine", math.nan)))
    ]
    groups = _grouped(
        rows,
        lambda r: (number(r["weight_decay"]), str(r["layer"]), number(r["width"])),
        lambda r: number(r["weak_additivity_cosine"]),
    )
    wds = sorted({wd for wd, _, _ in groups}, reverse=True)
    fig, axes = new_figure(1, len(wds), panel=(4.4, 3.4))
    for ax, wd in zip(axes[0], wds):
        layers = sorted({layer for d, layer, _ in groups if d == wd}, key=_layer_order)
        for j, layer in enumerate(layers):
            widths = sorted(w for d, name, w in groups if d == wd and name == layer)
            stats = [_mean_std(groups[(wd, layer, w)]) for w in widths]
            _errorbar(ax, widths, stats, color=f"C{j}", marker="o", label=f"layer {layer}")
            cells = ", ".join(f"{w:g}: {m:.4f}" for w, (m, _) in zip(widths, stats))
            print(f"wd {wd:g} layer {layer}: weak-additivity cosine by width: {cells}")
        ax.axhline(
            GAUSSIAN_RELU_LIMIT, color="k", linestyle="--", linewidth=0.9,
            label=f"Theorem 5.4, Gaussian limit {GAUSSIAN_RELU_LIMIT:.3f}",
        )  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_title(f"weight decay {wd:g}", fontsize=9.5)
        ax.set_xlabel("width (hidden units per layer)")
        ax.set_ylabel(r"$\cos(\sigma(u+v),\ \sigma(u)+\sigma(v))$")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    save_figure(fig, out, ("png",))


def _variants(results: Path) -> list[tuple[str, dict, Path]]:
    """(name, changed settings, folder) of each variant of a study with variants."""
    record = json.loads((results / "variants.json").read_text())
    return [(v["name"], v["changed"], results / v["folder"]) for v in record["variants"]]


def _pair_values(folder: Path, method: str, value) -> dict[float, list[float]]:
    """{width: [value(row) per pair]} from a results folder's results.csv at lambda = 1/2."""
    rows = [
        r
        for r in read_csv(folder / "results.csv")
        if r["method"] == method and number(r["lam"]) == 0.5
    ]
    return _grouped(rows, lambda r: number(r["width"]), value)


def _logit_ratio(folder: Path) -> dict[float, list[float]]:
    return _grouped(
        _logits_rows(folder),
        lambda r: number(r["width"]),
        lambda r: number(r["logit_norm"]) / number(r["logit_norm_lewc"]),
    )


def depth(results: Path, out: Path) -> None:
    depths, beta, norm, barrier = [], [], [], []
    for _, changed, folder in _variants(results):
        d = int(changed["model.depth"])
        ratio = _pair_values(
            folder,
            "none",
            lambda r: number(r["inverse_temperature"]) / number(r["ensemble_inverse_temperature"]),
        )
        (values,) = ratio.values()  # one width
        depths.append(d)
        beta.append(_mean_std(values))
        (norms,) = _logit_ratio(folder).values()
        norm.append(_mean_std(norms))
        (cal,) = _pair_values(
            folder, "none", lambda r: number(r["calibrated_midpoint_loss_barrier"])
        ).values()
        barrier.append(_mean_std(cal))
    order = np.argsort(depths)
    depths = [depths[i] for i in order]
    beta, norm, barrier = ([series[i] for i in order] for series in (beta, norm, barrier))
    fig, axes = new_figure(1, 2, panel=(4.6, 3.4))
    ax = axes[0, 0]
    _errorbar(ax, depths, beta, marker="o", label=r"measured $\beta(1/2)\,/\,\beta_{ens}(1/2)$")
    ax.plot(depths, [2.0**d for d in depths], "k--", label=r"LEWC: $2^{L-1} = 2^{depth}$")
    ax.set_yscale("log", base=2)
    ax.set_ylabel("midpoint β over the ensemble's")
    ax = axes[0, 1]
    _errorbar(ax, depths, norm, marker="o")
    ax.axhline(1.0, color="k", linestyle="--", linewidth=0.9, label="LEWC holds exactly")
    ax.set_ylabel(r"$E\|f(\theta_{1/2})\| \;/\; E\|(1/2)^L (f_A + f_B)\|$")
    for ax in axes[0]:
        ax.set_xlabel("depth (hidden layers)")
        ax.set_xticks(depths)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for d, b, n, c in zip(depths, beta, norm, barrier):
        print(
            f"depth {d}: beta(1/2)/beta_ens(1/2) {b[0]:.2f} ± {b[1]:.2f} (LEWC {2**d}); "
            f"logit norm / LEWC {n[0]:.3f} ± {n[1]:.3f}; calibrated midpoint barrier "
            f"{c[0]:.3f} ± {c[1]:.3f} nats"
        )
    save_figure(fig, out, ("png",))


def _hidden_weak_additivity(folder: Path) -> dict[float, list[float]]:
    """{width: [mean over hidden layers of weak_additivity_cosine, per pair]}."""
    rows = [
        r
        for r in read_csv(folder / "layers.csv")
        if r["kind"] != "logits" and r["method"] == "none" and number(r["lam"]) == 0.5
    ]
    per_pair = _grouped(
        rows,
        lambda r: (number(r["width"]), int(r["pair"])),
        lambda r: number(r["weak_additivity_cosine"]),
    )
    out: dict = defaultdict(list)
    for (width, _), values in sorted(per_pair.items()):
        out[width].append(float(np.mean(values)))
    return out


def _logits_lewc(folder: Path) -> dict[float, list[float]]:
    return _grouped(
        _logits_rows(folder), lambda r: number(r["width"]), lambda r: number(r["lewc_cosine"])
    )


def activations(results: Path, out: Path) -> None:
    fig, axes = new_figure(1, 3, panel=(4.2, 3.4))
    for i, (name, changed, folder) in enumerate(_variants(results)):
        panels = (
            _pair_values(folder, "none", lambda r: number(r["calibrated_midpoint_loss_barrier"])),
            _logits_lewc(folder),
            _hidden_weak_additivity(folder),
        )
        matched = _pair_values(
            folder, "weight", lambda r: number(r["calibrated_midpoint_loss_barrier"])
        )
        label = str(changed.get("model.activation", name))
        for ax, series in zip(axes[0], panels):
            widths = sorted(series)
            stats = [_mean_std(series[w]) for w in widths]
            _errorbar(ax, widths, stats, color=f"C{i}", marker="o", label=label)
        widths = sorted(matched)
        axes[0, 0].plot(
            widths, [_mean_std(matched[w])[0] for w in widths], color=f"C{i}", linestyle=":"
        )
        for title, series in zip(("barrier", "LEWC cosine", "weak additivity"), panels):
            cells = ", ".join(
                f"{w:g}: {_mean_std(series[w])[0]:.3f} ± {_mean_std(series[w])[1]:.3f}"
                for w in sorted(series)
            )
            print(f"{label}: {title} by width: {cells}")
        cells = ", ".join(f"{w:g}: {_mean_std(matched[w])[0]:.3f}" for w in sorted(matched))
        print(f"{label}: weight-matched barrier by width: {cells}")
    titles = (
        "calibrated midpoint barrier (nats)\n(dotted: weight matching)",
        "LEWC cosine at the logits, λ = ½",
        "weak-additivity cosine (hidden layers' mean)",
    )
    for ax, title in zip(axes[0], titles):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("width (hidden units per layer)")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0, 2].axhline(GAUSSIAN_RELU_LIMIT, color="k", linestyle="--", linewidth=0.9)
    axes[0, 0].legend(fontsize=7)
    save_figure(fig, out, ("png",))


def _layer_order(layer: str) -> tuple[int, str]:
    digits = "".join(ch for ch in layer if ch.isdigit())
    return (int(digits) if digits else 0, layer)


COMMANDS = {
    "random": random_permutations,
    "logit-norm": logit_norm,
    "weak-additivity": weak_additivity,
    "depth": depth,
    "activations": activations,
}


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in COMMANDS:
        print(__doc__, file=sys.stderr)
        return 2
    COMMANDS[argv[0]](Path(argv[1]), Path(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
