"""The merge-many study kind: sets of models on chosen data, merged and compared."""

from __future__ import annotations

import copy
import math
from fractions import Fraction
from pathlib import Path

import pytest
import torch

from lmc.config import LmcError
from lmc.data import load
from lmc.data.subsets import label_counts
from lmc.experiments import LocalExecutor, load_study, read_csv, resolve, run_study
from lmc.experiments.merge_many_study import expand_merge_many
from lmc.merge import average
from lmc.metrics import classification_metrics
from lmc.report import write_report
from lmc.store import RunStore

PARTS = [[0.2] * 5 + [0.8] * 5, [0.8] * 5 + [0.2] * 5]
TINY = {
    "name": "tiny-mm",
    "experiment": "merge-many",
    "data": {"dataset": "digits"},
    "model": {"name": "mlp", "depth": 2},
    "train": {"epochs": 2},
    "merge_many": {"width": 16, "max_rounds": 5},
    "sets": [
        {"name": "full", "models": 2},
        {"name": "halves", "models": 2, "subset": "random", "train_fraction": 0.5},
        {"name": "split", "models": 2, "subset": "labels", "label_parts": PARTS},
    ],
}


def _with(**changes):
    raw = copy.deepcopy(TINY)
    for key, value in changes.items():
        section, _, name = key.partition("__")
        if name:
            raw[section][name] = value
        else:
            raw[section] = value
    return raw


def test_defaults_and_every_key_checked():
    study = resolve(TINY)
    assert study["merge_many"] == {
        "width": 16, "weight_decay": 3e-3, "seed": 0, "methods": ["none", "weight"],
        "reference": True, "ece_bins": 15, "max_rounds": 5, "bn": "auto", "align_examples": 2000,
    }  # fmt: skip
    assert study["sets"][0] == {"name": "full", "models": 2, "subset": "all",
                                "train_fraction": None, "label_parts": None}  # fmt: skip
    bad = [
        (_with(merge_many={}), r"missing key 'merge_many.width'"),
        (_with(merge_many__depth=3), r"unknown key 'merge_many.depth'"),
        (_with(merge_many__methods=["activation"]), r"'merge_many.methods'"),
        (_with(merge_many__bn="repair"), r"'merge_many.bn'"),
        (_with(sets=[]), r"at least one \[\[sets\]\]"),
        (_with(sets=[{"name": "a", "models": 1}]), r"'sets\[0\] \(a\).models'"),
        (_with(sets=[{"name": "a", "models": 2, "subset": "random"}]), "needs train_fraction"),
        (_with(sets=[{"name": "a", "models": 2, "train_fraction": 0.5}]), "'random' only"),
        (_with(sets=[{"name": "a", "models": 3, "subset": "labels", "label_parts": PARTS}]),
         "one part .* per model: 3 parts"),
        (_with(sets=[{"name": "a", "models": 2, "subset": "labels",
                      "label_parts": [[0.5] * 9, [0.5] * 9]}]), r"must list 10 fractions"),
        (_with(sets=[{"name": "a", "models": 2, "subset": "labels",
                      "label_parts": [[0.6] * 10, [0.6] * 10]}]), r"add up to 1.2 > 1"),
        (_with(sets=[{"name": "a", "models": 2}, {"name": "a", "models": 2}]), "must differ"),
        (_with(data={"dataset": "digits", "options": {"train_size": 100}}), "each set chooses"),
        (_with(train={"weight_decay": 0.1}), r"unknown key 'train.weight_decay'"),
        ({**TINY, "sweep": {}}, r"unknown key 'sweep' for experiment 'merge-many'"),
    ]  # fmt: skip
    for raw, match in bad:
        with pytest.raises(LmcError, match=match):
            resolve(raw)


def test_each_model_gets_its_own_data_and_the_counts_are_exact():
    study = resolve(TINY)
    data = load("digits")
    train_jobs, set_jobs = expand_merge_many(study, data)
    assert len(train_jobs) == 1 + 2 + 2 + 2  # the reference and three sets of two
    n = len(data.y_train)
    for job in set_jobs:
        options = [c["dataset_options"] for c in job["configs"]]
        sizes = [len(load("digits", **o).y_train) for o in options]
        assert sizes == job["train_examples"]
        if job["set"]["name"] == "full":
            assert options == [{}, {}] and sizes == [n, n]
        if job["set"]["name"] == "halves":
            assert [o["subset_seed"] for o in options] == [0, 1] and sizes == [n // 2] * 2
        if job["set"]["name"] == "split":
            assert [o["label_part"] for o in options] == [0, 1]
            counts = label_counts(data.y_train, 10)
            first = load("digits", **options[0])
            exact = [math.floor(Fraction(str(f)) * c) for f, c in zip(PARTS[0], counts)]
            assert label_counts(first.y_train, 10) == exact
    seeds = {tuple(sorted(c["train"]["init_seed"] for c in j["configs"])) for j in set_jobs}
    assert seeds == {(0, 1)}
    assert set_jobs[0]["reference"]["train"]["init_seed"] == 1000


def test_a_set_with_its_own_seed_is_an_independent_repeat_and_the_others_keep_their_ids():
    data = load("digits")
    split = TINY["sets"][2]
    _, before = expand_merge_many(resolve(TINY), data)
    repeat = {**split, "name": "split-2", "seed": 20}
    _, after = expand_merge_many(resolve(_with(sets=[*TINY["sets"], repeat])), data)
    assert [j["id"] for j in after[:3]] == [j["id"] for j in before]  # earlier sets: same ids
    new = after[3]
    assert [c["train"]["init_seed"] for c in new["configs"]] == [20, 21]
    assert {c["dataset_options"]["subset_seed"] for c in new["configs"]} == {20}
    assert new["reference"] == before[0]["reference"]  # one reference for the study
    with pytest.raises(LmcError, match="seed"):
        resolve(_with(sets=[{**split, "seed": -1}]))


def test_a_tiny_study_runs_reuses_and_reports(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    study = resolve(TINY)
    record = run_study(study, out, executor=LocalExecutor(1), runs_dir=runs, quiet=True)
    assert record["experiment"] == "merge-many" and record["jobs"]["run"] == 7 + 3
    rows = read_csv(out / "models.csv")
    assert len(rows) == 3 * (2 + 1 + 2 + 1)  # per set: models, ensemble, 2 merges, reference
    # the numbers are those of the stored models, recomputed here
    data = load("digits")
    _, set_jobs = expand_merge_many(study, data)
    store = RunStore(runs)
    models = [store.find(c).build_model("cpu").eval() for c in set_jobs[2]["configs"]]
    with torch.no_grad():
        logits = [m(data.x_test) for m in models]
        merged = store.find(set_jobs[2]["configs"][0]).build_model("cpu").eval()
        merged.load_state_dict(average([m.state_dict() for m in models]))
        plain = merged(data.x_test)
    split = [r for r in rows if r["set"] == "split"]
    ensemble_row = next(r for r in split if r["role"] == "ensemble")
    merged_by = {r["method"]: r for r in split if r["role"] == "merged"}
    model_1 = next(r for r in split if r["role"] == "model" and r["index"] == 1)
    ensemble = classification_metrics(torch.stack(logits).mean(0), data.y_test)
    assert ensemble_row["test_accuracy"] == pytest.approx(ensemble["accuracy"])
    assert ensemble_row["test_ece"] == pytest.approx(ensemble["ece"])
    none = classification_metrics(plain, data.y_test)
    assert merged_by["none"]["test_loss"] == pytest.approx(none["loss"], rel=1e-6)
    assert model_1["train_examples"] == set_jobs[2]["train_examples"][1]
    assert merged_by["weight"]["rounds"] >= 1
    curves = read_csv(out / "reliability.csv")
    assert {r["label"] for r in curves if r["set"] == "full"} == {
        "model 0", "model 1", "ensemble", "merged (none)", "merged (weight)", "reference"
    }  # fmt: skip
    assert sum(r["count"] for r in curves if r["set"] == "full" and r["label"] == "ensemble") == (
        len(data.y_test)
    )

    again = run_study(study, out, executor=LocalExecutor(1), runs_dir=runs, quiet=True)
    assert again["jobs"] == {"total": 10, "reused": 10, "run": 0}
    written = write_report(out)
    text = Path(written["report_md"]).read_text()
    assert "### Set `split`" in text and "merged (weight)" in text
    assert [Path(f).name for f in written["figures"]] == ["merge_many.png", "reliability.png"]


@pytest.mark.parametrize(
    "name, subsets",
    [
        ("rebasin-merge-many-fmnist-mlp", {"all", "random"}),
        ("rebasin-split-data-fmnist-mlp", {"labels"}),
        ("rebasin-split-data-cifar100-resnet20", {"labels"}),
    ],
)
def test_the_packaged_recipes_resolve(name, subsets):
    study, text = load_study(name)
    assert study["experiment"] == "merge-many" and "Git Re-Basin" in text
    assert {s["subset"] for s in study["sets"]} == subsets


def test_docs_document_every_key():
    from lmc.experiments.merge_many_settings import SET_KEYS, SETTINGS

    text = (Path(__file__).resolve().parents[2] / "docs" / "studies.md").read_text()
    section = text.split('### `experiment = "merge-many"`', 1)[1].split("\n## ", 1)[0]
    for key in [*SETTINGS, *SET_KEYS]:
        assert f"| `{key}` |" in section, key
