"""The report reads the model's name from results.csv (or study.json) and labels widths with what
the model registry says they count; results written before a barrier was a column still read."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from lmc.metrics import BARRIER_KEYS
from lmc.models import MODELS
from lmc.report.figures import width_label
from lmc.report.results import load_results

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "results"
OLD_BARRIERS = ("loss_barrier", "midpoint_loss_barrier", "midpoint_accuracy_barrier")


def _folder(path: Path, model: str | None, study_model: str | None = None) -> Path:
    """A results folder with two widths, one pair, λ = 0, ½, 1 and three barrier columns (the
    shape of results written before the schema grew); ``model`` None: no model column."""
    path.mkdir()
    columns = ["width", "weight_decay", "pair", "method", "lam", "loss", "accuracy"]
    columns += ([] if model is None else ["model"]) + list(OLD_BARRIERS)
    with open(path / "results.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for width in (1, 2):
            for lam, loss, acc in ((0.0, 0.3, 0.9), (0.5, 0.8, 0.7), (1.0, 0.4, 0.88)):
                row = {"width": width, "weight_decay": 1e-3, "pair": 0, "method": "none"}
                row.update(lam=lam, loss=loss, accuracy=acc, loss_barrier=0.45)
                row.update(midpoint_loss_barrier=0.45, midpoint_accuracy_barrier=0.19)
                if model is not None:
                    row["model"] = model
                writer.writerow(row)
    if study_model is not None:
        study = {"name": "s", "config": {"model": {"name": study_model}}}
        (path / "study.json").write_text(json.dumps(study))
    return path


@pytest.mark.parametrize(
    ("model", "label"),
    [
        ("mlp", "hidden units per layer"),
        ("vgg11", "channel multiplier"),
        ("vit", "embedding dimension"),
    ],
)
def test_width_axis_says_what_the_registry_says(tmp_path, model, label):
    res = load_results(_folder(tmp_path / "r", model))
    assert res.model == model
    assert res.width_label == label == MODELS[model].width_label
    assert width_label(res) == f"width ({label}, log scale)"


def test_model_name_falls_back_to_study_json(tmp_path):
    res = load_results(_folder(tmp_path / "r", None, study_model="resnet20"))
    assert res.model == "resnet20"
    assert res.width_label == "channel multiplier"


def test_unknown_model_gets_a_plain_width_axis(tmp_path):
    res = load_results(_folder(tmp_path / "r", None))
    assert res.model == "?" and res.model_entry is None and res.width_label is None
    assert width_label(res) == "width (log scale)"
    res = load_results(_folder(tmp_path / "s", "my-net"))
    assert res.width_label is None and width_label(res) == "width (log scale)"


def test_old_results_without_the_new_barrier_columns_read_as_nan(tmp_path):
    res = load_results(_folder(tmp_path / "r", "mlp"))
    for row in res.rows:
        assert set(BARRIER_KEYS) <= set(row)
        for key in BARRIER_KEYS:
            assert (key in OLD_BARRIERS) == math.isfinite(row[key])
    assert res.stat("midpoint_loss_barrier", weight_decay=1e-3, method="none", width=2) == (
        pytest.approx(0.45),
        0.0,
        1,
    )


def test_the_committed_vit_study_is_labelled_by_embedding_dimension():
    res = load_results(COMMITTED / "rebasin-fmnist-vit")
    assert res.model == "vit"
    assert width_label(res) == "width (embedding dimension, log scale)"
