"""Figures and numbers for the LLFC experiments (Zhou et al. 2023), from committed study results.

Each subcommand reads the results folder a recipe wrote (results.csv, layers.csv and, for a
study with variants, variants.json), draws one figure (PNG, 200 dpi) and prints the numbers the
README quotes, so every number there can be re-derived from the committed files:

    python scripts/llfc_figures.py spawning  RESULTS_DIR  OUT.png
        a study with spawn-epoch variants (recipe llfc-spawning-fmnist-mlp): the midpoint
        accuracy and loss barriers of the unpermuted merge, and per layer E[1 - llfc_cosine]
        (the merged model's features against (f_A + f_B)/2) beside the baseline
        E[1 - endpoint_cosine] (f_A against f_B), against the epoch K of the split
        (K = 0: independently trained); LLFC Figs. 2-4. Also printed per layer: the
        commutativity distance, weight distance and commutativity_relative (see methods)
    python scripts/llfc_figures.py methods   RESULTS_DIR  OUT.png
        a study with several merge methods (recipe llfc-methods-fmnist-mlp): per layer the
        commutativity distance ||(W_A - W_B)(H_A - H_B)||_F / sqrt(N) against the weight
        distance ||W_A - W_B||_F and against the feature distance ||H_A - H_B||_F / sqrt(N),
        one marker per method, and the relative residual commutativity_relative (= the
        commutativity distance over the product of the two distances, in [0, 1]); LLFC Fig. 7
    python scripts/llfc_figures.py stitching RESULTS_DIR  OUT.png
        a study with [stitch] enabled, with or without variants (recipe
        llfc-stitching-fmnist-mlp): the test error of A's first l layers followed by B's
        (stitch.csv), against l = 0 (B) .. L (A), one line per variant and method, beside the
        endpoints' mean error; LLFC App. B.4, Tables 2-3. Errors in percent

Conventions: every quantity is read at lambda = 1/2 (theta(1/2) = (theta_A + theta_B)/2; for a
matched pair B is the permuted B). Means and sample standard deviations (ddof 1; 0 for one
pair) are over pairs. Barriers are in nats (loss) and percentage points (accuracy, the mean of
the endpoints' accuracies minus the midpoint's). A layer record ``layer`` l compares the
features at layer l's output (``kind`` hidden, or logits) and, for commutativity, layer l's
weight W_l and input H_(l-1); the first layer's input is the data, identical for A and B, so
its feature distance and commutativity residual are 0 and it is left out of the methods
figure (it is still printed).
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from lmc.experiments import read_csv
from lmc.experiments.cells import method_sort_key, number
from lmc.metrics.figures import new_figure, save_figure

METHOD_LABELS = {
    "none": "no permutation",
    "weight": "weight matching",
    "activation": "activation matching",
    "ste": "STE",
    "random": "random permutation",
}
METHOD_MARKERS = {"none": "o", "weight": "s", "activation": "^", "ste": "D", "random": "v"}


def mean_std(values: list[float]) -> tuple[float, float]:
    """(mean, sample standard deviation) of the finite values; (nan, nan) for none."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return math.nan, math.nan
    return float(np.mean(finite)), float(np.std(finite, ddof=1)) if len(finite) > 1 else 0.0


def _grouped(rows, key, value) -> dict:
    """{key(row): [value(row), ...]} over the rows."""
    out: dict = defaultdict(list)
    for r in rows:
        out[key(r)].append(value(r))
    return out


def _at_half(rows: list[dict], method: str | None = None) -> list[dict]:
    """The rows at lambda = 1/2 (of ``method`` when given)."""
    return [
        r
        for r in rows
        if number(r["lam"]) == 0.5 and (method is None or str(r["method"]) == method)
    ]


def _layer_key(layer) -> tuple[int, str]:
    text = str(layer)
    digits = "".join(ch for ch in text if ch.isdigit())
    return (int(digits) if digits else 0, text)


def _variants(results: Path) -> list[tuple[str, dict, Path]]:
    """(name, changed settings, folder) of each variant of a study with variants."""
    record = json.loads((results / "variants.json").read_text())
    return [(v["name"], v["changed"], results / v["folder"]) for v in record["variants"]]


def barriers(folder: Path, method: str) -> dict[str, tuple[float, float]]:
    """Mean ± std over pairs of ``method``'s midpoint loss barrier (nats), midpoint accuracy
    barrier (percentage points) and merged accuracy at lambda = 1/2 (%)."""
    rows = _at_half(read_csv(folder / "results.csv"), method)
    return {
        "loss": mean_std([number(r["midpoint_loss_barrier"]) for r in rows]),
        "accuracy": mean_std([100 * number(r["midpoint_accuracy_barrier"]) for r in rows]),
        "merged": mean_std([100 * number(r["accuracy"]) for r in rows]),
        "pairs": (float(len(rows)), 0.0),
    }


def layer_stats(folder: Path, method: str, keys: tuple[str, ...]) -> dict[str, dict]:
    """{layer: {"kind": kind, key: (mean, std) over pairs}} of ``method`` at lambda = 1/2.
    A key ``1-NAME`` is one minus the column NAME."""

    def value(row: dict, key: str) -> float:
        if key.startswith("1-"):
            return 1.0 - number(row[key[2:]])
        return number(row[key])

    rows = _at_half(read_csv(folder / "layers.csv"), method)
    by_layer = _grouped(rows, lambda r: str(r["layer"]), lambda r: r)
    out = {}
    for layer in sorted(by_layer, key=_layer_key):
        group = by_layer[layer]
        out[layer] = {"kind": str(group[0]["kind"])}
        for key in keys:
            out[layer][key] = mean_std([value(r, key) for r in group])
    return out


SPAWNING_KEYS = (
    "1-llfc_cosine",
    "1-endpoint_cosine",
    "llfc_scale",
    "commutativity_distance",
    "weight_distance",
    "commutativity_relative",
)


def spawning(results: Path, out: Path) -> None:
    entries = []
    for name, changed, folder in _variants(results):
        k = int(changed.get("sweep.spawn_epoch", 0))
        stats = layer_stats(folder, "none", SPAWNING_KEYS)
        entries.append((k, name, barriers(folder, "none"), stats))
    entries.sort(key=lambda e: e[0])
    epochs = [k for k, *_ in entries]
    xs = list(range(len(epochs)))  # evenly spaced, labelled with K
    fig, axes = new_figure(1, 3, panel=(4.2, 3.4))
    for ax, key, label in zip(
        axes[0, :2],
        ("accuracy", "loss"),
        ("midpoint accuracy barrier (points)", "midpoint loss barrier (nats)"),
    ):
        stats = [b[key] for _, _, b, _ in entries]
        ax.errorbar(xs, [m for m, _ in stats], yerr=[s for _, s in stats], marker="o", capsize=3)
        ax.axhline(0.0, color="0.5", linewidth=0.8)
        ax.set_ylabel(label)
    ax = axes[0, 2]
    layers = sorted({layer for *_, s in entries for layer in s}, key=_layer_key)
    for j, layer in enumerate(layers):
        kind = next(s[layer]["kind"] for *_, s in entries if layer in s)
        llfc = [s[layer]["1-llfc_cosine"] if layer in s else (math.nan, 0.0) for *_, s in entries]
        ends = [
            s[layer]["1-endpoint_cosine"] if layer in s else (math.nan, 0.0) for *_, s in entries
        ]
        name = f"layer {layer}" + (" (logits)" if kind == "logits" else "")
        ax.errorbar(
            xs, [m for m, _ in llfc], yerr=[s for _, s in llfc], color=f"C{j}", marker="o",
            capsize=3, label=f"{name}: 1 - cos(merged, mean)",
        )  # fmt: skip
        ax.plot(xs, [m for m, _ in ends], color=f"C{j}", linestyle=":", marker="x")
    ax.plot([], [], color="0.4", linestyle=":", marker="x", label="dotted: 1 - cos(A, B)")
    ax.set_yscale("log")
    ax.set_ylabel("E[1 - cosine] at λ = ½")
    ax.legend(fontsize=6.5)
    for ax in axes[0]:
        ax.set_xticks(xs, [f"{k}" if k else "0\n(indep.)" for k in epochs])
        ax.set_xlabel("spawn epoch K")
        ax.grid(alpha=0.3)
    for k, _, b, stats in entries:
        kind = "independent" if k == 0 else f"spawned after {k} epoch{'s' if k > 1 else ''}"
        print(
            f"K = {k} ({kind}, {int(b['pairs'][0])} pairs): midpoint accuracy barrier "
            f"{b['accuracy'][0]:.2f} ± {b['accuracy'][1]:.2f} points, midpoint loss barrier "
            f"{b['loss'][0]:.3f} ± {b['loss'][1]:.3f} nats, merged accuracy {b['merged'][0]:.2f} %"
        )
        for layer, s in stats.items():
            print(
                f"K = {k} layer {layer} ({s['kind']}): 1 - llfc_cosine "
                f"{s['1-llfc_cosine'][0]:.3g} ± {s['1-llfc_cosine'][1]:.2g}, "
                f"1 - endpoint_cosine {s['1-endpoint_cosine'][0]:.3g} ± "
                f"{s['1-endpoint_cosine'][1]:.2g} (ratio of the means "
                f"{s['1-llfc_cosine'][0] / s['1-endpoint_cosine'][0]:.3g}), "
                f"llfc_scale {s['llfc_scale'][0]:.3f}; commutativity distance "
                f"{s['commutativity_distance'][0]:.3f}, weight distance "
                f"{s['weight_distance'][0]:.3f}, relative {s['commutativity_relative'][0]:.4f}"
            )
        hidden = [s["1-llfc_cosine"][0] for s in stats.values() if s["kind"] != "logits"]
        print(f"K = {k}: mean over hidden layers of 1 - llfc_cosine {float(np.mean(hidden)):.3g}")
    save_figure(fig, out, ("png",))


COMMUTATIVITY_KEYS = (
    "commutativity_distance",
    "weight_distance",
    "input_distance",
    "commutativity_relative",
    "1-llfc_cosine",
    "1-endpoint_cosine",
)


def methods(results: Path, out: Path) -> None:
    rows = read_csv(results / "results.csv")
    present = sorted({str(r["method"]) for r in rows}, key=method_sort_key)
    stats = {m: layer_stats(results, m, COMMUTATIVITY_KEYS) for m in present}
    for method in present:
        b = barriers(results, method)
        print(
            f"{method}: midpoint accuracy barrier {b['accuracy'][0]:.2f} ± {b['accuracy'][1]:.2f} "
            f"points, midpoint loss barrier {b['loss'][0]:.3f} ± {b['loss'][1]:.3f} nats "
            f"({int(b['pairs'][0])} pairs)"
        )
        for layer, s in stats[method].items():
            print(
                f"{method} layer {layer} ({s['kind']}): commutativity distance "
                f"{s['commutativity_distance'][0]:.3f}, weight distance "
                f"{s['weight_distance'][0]:.3f}, feature distance {s['input_distance'][0]:.3f}, "
                f"relative {s['commutativity_relative'][0]:.4f}, 1 - llfc_cosine "
                f"{s['1-llfc_cosine'][0]:.3g}, 1 - endpoint_cosine {s['1-endpoint_cosine'][0]:.3g}"
            )
    # the first layer reads the data itself: no feature distance, nothing to plot
    layers = sorted(
        {
            layer
            for per_layer in stats.values()
            for layer, s in per_layer.items()
            if math.isfinite(s["input_distance"][0]) and s["input_distance"][0] > 0
        },
        key=_layer_key,
    )
    fig, axes = new_figure(1, 3, panel=(4.2, 3.4))
    for method in present:
        marker = METHOD_MARKERS.get(method, "o")
        label = METHOD_LABELS.get(method, method)
        shown = [layer for layer in layers if layer in stats[method]]
        for layer in shown:
            s = stats[method][layer]
            color = f"C{layers.index(layer)}"
            y = s["commutativity_distance"][0]
            axes[0, 0].scatter(s["weight_distance"][0], y, marker=marker, color=color)
            axes[0, 1].scatter(s["input_distance"][0], y, marker=marker, color=color)
        axes[0, 0].scatter([], [], marker=marker, color="0.3", label=label)
        axes[0, 2].plot(
            [_layer_key(layer)[0] for layer in shown],
            [stats[method][layer]["commutativity_relative"][0] for layer in shown],
            marker=marker, color="k", label=label,
        )  # fmt: skip
    for j, layer in enumerate(layers):
        kind = next(per[layer]["kind"] for per in stats.values() if layer in per)
        name = f"layer {layer}" + (" (logits)" if kind == "logits" else "")
        axes[0, 1].scatter([], [], marker="s", color=f"C{j}", label=name)
    axes[0, 0].set_xlabel(r"weight distance $\|W_A - W_B\|_F$")
    axes[0, 1].set_xlabel(r"feature distance $\|H_A - H_B\|_F / \sqrt{N}$")
    for ax in axes[0, :2]:
        ax.set_ylabel("commutativity distance")
        ax.set_title(r"$\|(W_A - W_B)(H_A - H_B)\|_F / \sqrt{N}$ per layer, λ = ½", fontsize=9)
        ax.legend(fontsize=7)
    axes[0, 2].set_title("commutativity over (weight dist. × feature dist.)", fontsize=9)
    axes[0, 2].set_xlabel("layer")
    axes[0, 2].set_ylabel("commutativity_relative")
    axes[0, 2].set_xticks([_layer_key(layer)[0] for layer in layers])
    axes[0, 2].legend(fontsize=7)
    for ax in axes[0]:
        ax.grid(alpha=0.3)
    save_figure(fig, out, ("png",))


def _variant_label(name: str, changed: dict) -> str:
    """A spawn-epoch variant as "independent" / "spawned at epoch K", else its name."""
    if "sweep.spawn_epoch" not in changed:
        return name
    k = int(changed["sweep.spawn_epoch"])
    return "independent" if k == 0 else f"spawned at epoch {k}"


def stitching(results: Path, out: Path) -> None:
    folders = (
        [(_variant_label(name, changed), folder) for name, changed, folder in _variants(results)]
        if (results / "variants.json").is_file()
        else [("", results)]
    )
    fig, axes = new_figure(1, 1, panel=(5.6, 3.8))
    ax = axes[0][0]
    endpoints, total = [], 0
    for name, folder in folders:
        rows = read_csv(folder / "stitch.csv")
        for method in sorted({r["method"] for r in rows}, key=method_sort_key):
            by_layer = _grouped(
                [r for r in rows if r["method"] == method],
                lambda r: r["layer"],
                lambda r: r["error"],
            )
            layers = sorted(by_layer)
            stats = [mean_std(by_layer[k]) for k in layers]
            means = [100 * m for m, _ in stats]
            label = (
                f"{name}, {METHOD_LABELS.get(method, method)}"
                if name
                else METHOD_LABELS.get(method, method)
            )
            ax.plot(layers, means, marker=METHOD_MARKERS.get(method, "o"), label=label)
            ends = [
                (r["error_a"] + r["error_b"]) / 2
                for r in rows
                if r["method"] == method and r["layer"] == 0
            ]
            endpoints.extend(ends)
            total = max(total, int(max(layers)))
            interior = [f"{100 * m:.2f} ± {100 * sd:.2f}" for m, sd in stats]
            print(
                f"{label}: stitched error (%) at l = {', '.join(str(int(k)) for k in layers)}: "
                f"{' / '.join(interior)}; endpoints {100 * mean_std(ends)[0]:.2f}"
            )
    ax.axhline(100 * mean_std(endpoints)[0], color="#555555", ls=":", label="mean endpoint error")
    ax.set_xticks(range(total + 1), ["0\nB", *(str(i) for i in range(1, total)), f"{total}\nA"])
    ax.set_xlabel("l: layers taken from A (then B's)")
    ax.set_ylabel("test error (%)")
    ax.set_yscale("log")
    ax.legend(frameon=False, fontsize=8)
    ax.grid(alpha=0.3)
    save_figure(fig, out, ("png",))


COMMANDS = {"spawning": spawning, "methods": methods, "stitching": stitching}


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in COMMANDS:
        print(__doc__, file=sys.stderr)
        return 2
    COMMANDS[argv[0]](Path(argv[1]), Path(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
