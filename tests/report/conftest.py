"""A small but realistic synthetic results folder, as ``lmc.experiments`` writes it.

Numbers are made up (seeded numpy) with the qualitative shape of the width paper: merged
accuracy and the cosines rise with width, barriers fall, weak weight decay is worse. The
barrier columns follow docs/science.md's formulas on the generated curves.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

RESULT_COLUMNS = [
    "dataset", "model", "width", "weight_decay", "pair", "method", "lam", "split", "bn", "loss",
    "accuracy", "calibrated_loss", "inverse_temperature", "ensemble_loss", "ensemble_accuracy",
    "ensemble_calibrated_loss", "ensemble_inverse_temperature", "logit_norm", "loss_barrier",
    "midpoint_loss_barrier", "max_minus_mean_loss", "accuracy_barrier",
    "midpoint_accuracy_barrier", "calibrated_loss_barrier", "calibrated_midpoint_loss_barrier",
    "calibrated_max_minus_mean_loss",
]  # fmt: skip
# A realistic subset: commutativity, stable rank and a few others are deliberately absent.
LAYER_COLUMNS = [
    "width", "weight_decay", "pair", "method", "lam", "layer", "name", "kind", "lewc_cosine",
    "lewc_relative_error", "lewc_coef_a", "lewc_coef_b", "lewc_expected_a", "lewc_expected_b",
    "llfc_cosine", "llfc_scale", "endpoint_cosine", "weak_additivity_cosine", "sign_agreement",
    "reciprocal_ratio", "reciprocal_ratio_ba", "reciprocal_cosine", "near_zero_fraction_a",
    "near_zero_fraction_b", "large_unit_overlap", "effective_rank_a", "effective_rank_b",
]  # fmt: skip
LAYERS = [(1, "fc1", "hidden"), (2, "fc2", "hidden"), (3, "fc3", "hidden"), (4, "out", "logits")]


@dataclass
class Synthetic:
    path: Path
    rows: list[dict] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    toml: str = ""


def _cell(v):
    if isinstance(v, float) and math.isnan(v):
        return ""
    return v


def write_csv(path: Path, columns: list[str], rows: list[dict]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for r in rows:
            writer.writerow({c: _cell(r.get(c, math.nan)) for c in columns})


def make_results(
    path: Path,
    *,
    widths=(16, 64, 256),
    weight_decays=(3e-3, 1e-4),
    pairs=2,
    methods=("none", "weight"),
    lams=11,
    calibrate=True,
    extras=True,
    seed=0,
) -> Synthetic:
    rng = np.random.default_rng(seed)
    path.mkdir(parents=True, exist_ok=True)
    grid = np.linspace(0.0, 1.0, lams)
    rows, layer_rows, moments, spectra = [], [], [], []
    for wd in weight_decays:
        weak = 1.0 if wd >= 1e-3 else 2.5  # weak weight decay: everything worse
        for w in widths:
            grow = math.log2(w / widths[0]) / 4 if len(widths) > 1 else 0.0
            for p in range(pairs):
                acc_a, acc_b = 0.90 + 0.02 * grow + rng.normal(0, 0.004, 2)
                loss_a, loss_b = 0.35 - 0.05 * grow + rng.normal(0, 0.01, 2)
                ens_beta = 1.1 + rng.normal(0, 0.02)
                for method in methods:
                    dip = weak * (0.45 if method == "none" else 0.12) / (1 + w / 24)
                    dip *= 1 + rng.normal(0, 0.15)
                    bump = 4 * grid * (1 - grid)
                    acc = (1 - grid) * acc_a + grid * acc_b - dip * bump
                    acc = np.clip(acc + rng.normal(0, 0.002, lams) * bump, 0, 1)
                    loss = (1 - grid) * loss_a + grid * loss_b + (4 * dip + 0.25) * bump
                    closs = (1 - grid) * (loss_a - 0.02) + grid * (loss_b - 0.02) + 2 * dip * bump
                    beta = 1.0 + (0.4 + 6.0 * w / (w + 64) / weak) * bump
                    ens_acc = (1 - grid) * acc_a + grid * acc_b + 0.01 * bump
                    lin = (1 - grid) * loss_a + grid * loss_b
                    clin = (1 - grid) * closs[0] + grid * closs[-1]
                    alin = (1 - grid) * acc[0] + grid * acc[-1]
                    mid = lams // 2
                    barriers = {
                        "loss_barrier": float(np.max(loss - lin)),
                        "midpoint_loss_barrier": float(loss[mid] - 0.5 * (loss[0] + loss[-1])),
                        "max_minus_mean_loss": float(loss.max() - 0.5 * (loss[0] + loss[-1])),
                        "accuracy_barrier": float(np.max(alin - acc)),
                        "midpoint_accuracy_barrier": float(0.5 * (acc[0] + acc[-1]) - acc[mid]),
                        "calibrated_loss_barrier": float(np.max(closs - clin)),
                        "calibrated_midpoint_loss_barrier": float(
                            closs[mid] - 0.5 * (closs[0] + closs[-1])
                        ),
                        "calibrated_max_minus_mean_loss": float(
                            closs.max() - 0.5 * (closs[0] + closs[-1])
                        ),
                    }
                    if not calibrate:
                        for k in list(barriers):
                            if k.startswith("calibrated"):
                                barriers[k] = math.nan
                    for i, lam in enumerate(grid):
                        rows.append(
                            {
                                "dataset": "digits",
                                "model": "mlp",
                                "width": w,
                                "weight_decay": wd,
                                "pair": p,
                                "method": method,
                                "lam": round(float(lam), 10),
                                "split": "test",
                                "bn": "none",
                                "loss": float(loss[i]),
                                "accuracy": float(acc[i]),
                                "calibrated_loss": float(closs[i]) if calibrate else math.nan,
                                "inverse_temperature": float(beta[i]) if calibrate else math.nan,
                                "ensemble_loss": float(lin[i] - 0.01 * bump[i]),
                                "ensemble_accuracy": float(ens_acc[i]),
                                "ensemble_calibrated_loss": (
                                    float(lin[i]) if calibrate else math.nan
                                ),
                                "ensemble_inverse_temperature": ens_beta if calibrate else math.nan,
                                "logit_norm": float(10 * (1 - 0.8 * bump[i])),
                                **barriers,
                            }
                        )
                    if not extras:
                        continue
                    for layer, name, kind in LAYERS:
                        fall = weak * (1 - w / (w + 48)) * layer / 4
                        layer_rows.append(
                            {
                                "width": w,
                                "weight_decay": wd,
                                "pair": p,
                                "method": method,
                                "lam": 0.5,
                                "layer": layer,
                                "name": name,
                                "kind": kind,
                                "lewc_cosine": 1 - 0.6 * fall + rng.normal(0, 0.005),
                                "lewc_relative_error": 0.8 * fall,
                                "lewc_coef_a": 0.5**layer * (1 - fall),
                                "lewc_coef_b": 0.5**layer * (1 - fall),
                                "lewc_expected_a": 0.5**layer,
                                "lewc_expected_b": 0.5**layer,
                                "llfc_cosine": 1 - 0.3 * fall,
                                "llfc_scale": 0.5 ** (layer - 1),
                                "endpoint_cosine": 0.3 + 0.2 * grow,
                                "weak_additivity_cosine": (
                                    math.nan if kind == "logits" else 0.99 - 0.15 * fall
                                ),
                                "sign_agreement": math.nan if kind == "logits" else 0.6,
                                "reciprocal_ratio": 0.9 - 0.5 * grow / weak,
                                "reciprocal_ratio_ba": 0.9 - 0.5 * grow / weak,
                                "reciprocal_cosine": 0.95 - 0.3 * fall,
                                "near_zero_fraction_a": 0.2 + 0.3 * grow,
                                "near_zero_fraction_b": 0.2 + 0.3 * grow,
                                "large_unit_overlap": 0.5 - 0.2 * grow,
                                "effective_rank_a": w / (4 * weak),
                                "effective_rank_b": w / (4 * weak),
                            }
                        )
                if not extras:
                    continue
                for layer, name, kind in LAYERS:
                    fan_in = 64 if layer == 1 else w
                    fan_out = 10 if kind == "logits" else w
                    for model in ("a", "b"):
                        key = {"width": w, "weight_decay": wd, "pair": p, "layer": layer,
                               "name": name, "model": model}  # fmt: skip
                        if kind != "logits":
                            small = rng.random(w) < (0.2 + 0.4 * grow) / weak
                            values = np.exp(rng.normal(0.0, 0.5, w))
                            values[small] *= 1e-3
                            values[rng.random(w) < 0.03] = 0.0
                            moments.append({**key, "values": values.tolist()})
                        k = min(fan_in, fan_out)
                        decay = 0.15 * k * weak
                        sv = np.sort(np.exp(-np.arange(k) / decay) * (1 + 0.05 * rng.random(k)))
                        spectra.append({**key, "singular_values": (3.0 * sv[::-1]).tolist()})
    write_csv(path / "results.csv", RESULT_COLUMNS, rows)
    config = {
        "name": "synthetic-width-study",
        "description": "Synthetic numbers for testing the report.",
        "data": {"dataset": "digits", "options": {}, "split": "test"},
        "model": {"name": "mlp", "depth": 3, "norm": "none"},
        "sweep": {
            "widths": list(widths),
            "weight_decays": list(weight_decays),
            "pairs": pairs,
            "spawn_epoch": 0,
            "seed": 0,
        },
        "train": {"epochs": 7, "lr": 0.05},
        "merge": {"methods": list(methods), "lambdas": lams, "calibrate": calibrate, "bn": "auto"},
        "analysis": {"enabled": extras, "lambdas": [0.5], "max_examples": 2000},
    }
    toml = (
        'name = "synthetic-width-study"\n\n[data]\ndataset = "digits"\n\n'
        '[model]\nname = "mlp"\ndepth = 3\n\n[sweep]\nwidths = [16, 64, 256]\n'
        "weight_decays = [3e-3, 1e-4]\n\n[train]\nepochs = 7 # <seven> & done\n"
    )
    if extras:
        write_csv(path / "layers.csv", LAYER_COLUMNS, layer_rows)
        (path / "moments.json").write_text(json.dumps(moments))
        (path / "spectra.json").write_text(json.dumps(spectra))
        (path / "study.toml").write_text(toml)
        study = {
            "name": config["name"],
            "description": config["description"],
            "config": config,
            "environment": {
                "lmc": "0.1.0",
                "python": "3.11.2",
                "torch": "2.13.0",
                "numpy": "2.1.0",
                "scipy": "1.14.0",
                "platform": "Linux-test",
                "processor": "x86_64",
                "cpu_count": 2,
                "device": "cpu",
            },
            "started": "2025-01-01T10:00:00",
            "finished": "2025-01-01T10:12:34",
            "wall_seconds": 754.2,
            "jobs": {"total": 48, "reused": 12, "run": 36},
        }
        (path / "study.json").write_text(json.dumps(study, indent=2))
    return Synthetic(path=path, rows=rows, config=config, toml=toml)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Synthetic:
    return make_results(tmp_path_factory.mktemp("results") / "study")


@pytest.fixture(scope="session")
def _rendered_once(tmp_path_factory):
    """The report of a synthetic folder, written once per session (each render draws every
    figure as PNG and SVG: seconds) from a folder of its own that no test changes."""
    from lmc.report import write_report

    folder = make_results(tmp_path_factory.mktemp("rendered-results") / "study")
    out = tmp_path_factory.mktemp("report")
    return write_report(folder.path, out_dir=out, title="Synthetic width study")


@pytest.fixture(scope="module")
def rendered(synthetic, _rendered_once):
    """The report of ``synthetic``'s numbers: ``make_results`` is seeded, so the folder the
    shared report was written from holds the same files as ``synthetic`` has before a test
    changes them. Tests only read the report."""
    return _rendered_once


@pytest.fixture
def make_synthetic():
    return make_results


@dataclass(frozen=True)
class Writers:
    """The fixture's writers, for tests that build their own (module-scoped) folders."""

    make_results: object = make_results
    write_csv: object = write_csv
    result_columns: tuple = tuple(RESULT_COLUMNS)


@pytest.fixture(scope="session")
def writers() -> Writers:
    return Writers()


class HtmlText(HTMLParser):
    """Collects <img> sources, heading ids, TOC links, table cells and all text."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.ids: list[str] = []
        self.links: list[str] = []
        self.cells: list[str] = []
        self.text: list[str] = []
        self.external: list[str] = []
        self._in_cell = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs.get("src") or "")
        if tag in ("h1", "h2", "h3") and "id" in attrs:
            self.ids.append(attrs["id"])
        if tag == "a" and attrs.get("href", "").startswith("#"):
            self.links.append(attrs["href"][1:])
        if tag in ("link", "script") or (tag == "a" and "://" in attrs.get("href", "")):
            self.external.append(tag)
        if tag == "td":
            self._in_cell = True
            self.cells.append("")

    def handle_endtag(self, tag):
        if tag == "td":
            self._in_cell = False

    def handle_data(self, data):
        self.text.append(data)
        if self._in_cell:
            self.cells[-1] += data


def parse_html_file(html_path: str) -> HtmlText:
    collector = HtmlText()
    collector.feed(Path(html_path).read_text())
    return collector


@pytest.fixture(scope="session")
def parse_html():
    """``parse_html(path)``: a report's HTML file read into :class:`HtmlText` (its images,
    heading ids, links, table cells and text)."""
    return parse_html_file
