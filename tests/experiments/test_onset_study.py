"""The onset study (Git Re-Basin Fig. 3): strict settings, states captured during one training
pass that are the very run train_run makes, a tiny real run, reuse and resume, the report."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest
import torch

from lmc.config import LmcError
from lmc.experiments import load_study, read_csv, resolve, run_study
from lmc.experiments.onset_study import SETTINGS, train_capturing, train_config
from lmc.models import build
from lmc.report import write_report
from lmc.report.onset import _cell, paired_sentence, summarise, verdict
from lmc.store import RunStore
from lmc.train import train_run
from lmc.train.evaluate import evaluate

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DOCS = Path(__file__).resolve().parents[2] / "docs" / "studies.md"


def _study(train=None, **settings):
    return {
        "name": "onset-test",
        "experiment": "onset",
        "data": {"dataset": "digits"},
        "model": {"name": "mlp", "depth": 2},
        "train": {"epochs": 3, "batch_size": 64, **(train or {})},
        "onset": {"width": 16, **settings},
    }


@pytest.fixture(autouse=True)
def one_thread():
    """The study trains with one thread (no executor: ``threads`` 1); train_run here too, so
    the two are bit-identical (another thread count may change the last bits)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_defaults_are_filled_and_every_key_is_checked():
    study = resolve(_study())
    assert study["experiment"] == "onset" and study["data"]["split"] == "test"
    assert study["model"]["depth"] == 2 and study["model"]["norm"] == "none"
    assert study["onset"] == {
        "width": 16,
        "weight_decay": 1e-4,
        "pairs": 2,
        "seed": 0,
        "epochs": [0, 1, 2, 3],  # every epoch 0..train.epochs
        "methods": ["none", "weight"],
        "alignment": ["weak"],
        "lambdas": 11,
        "calibrate": False,
        "align_seed": 0,
        "align_examples": 2000,
    }
    assert resolve(_study(epochs=[3, 0, 1]))["onset"]["epochs"] == [0, 1, 3]
    bad = {
        r"unknown key 'onset.widths'": _study(widths=[4]),
        r"missing key 'onset.width'": {**_study(), "onset": {}},
        r"'onset.width' must be int or float": _study(width="wide"),
        r"'onset.width'.*positive": _study(width=-1),
        r"'onset.pairs' must be int": _study(pairs=1.5),
        r"'onset.pairs'.*at least 1": _study(pairs=0),
        r"'onset.seed'.*at least 0": _study(seed=-1),
        r"'onset.weight_decay'": _study(weight_decay=-1e-4),
        r"'onset.calibrate' must be bool": _study(calibrate=1),
        r"'onset.epochs': epoch 4 exceeds the 3 training epochs": _study(epochs=[0, 4]),
        r"'onset.epochs'.*integer": _study(epochs=[0, 1.5]),
        r"'onset.epochs' is empty": _study(epochs=[]),
        r"'onset.epochs' lists an epoch twice": _study(epochs=[1, 1]),
        r"unknown method 'annealing' in 'onset.methods'": _study(methods=["annealing"]),
        r"'onset.methods' lists a method twice": _study(methods=["none", "none"]),
        r"'onset.lambdas'": _study(lambdas=[0.5, 2.0]),
        r"unknown key 'train.weight_decay'.*set in \[onset\]": _study({"weight_decay": 0.1}),
        r"\[train\].*epochs": _study({"epochs": 0}),
        r"'model.width' is set in \[onset\]": {**_study(), "model": {"name": "mlp", "width": 8}},
        r"unknown dataset 'nope'": {**_study(), "data": {"dataset": "nope"}},
        r"'data.split' must be train or test": {**_study(), "data": {"dataset": "digits",
                                                                    "split": "val"}},
        r"missing key 'data.dataset'": {k: v for k, v in _study().items() if k != "data"},
        r"unknown key 'model.size'": {**_study(), "model": {"name": "mlp", "size": 8}},
        r"unknown key 'sweep' .*top-level keys": {**_study(), "sweep": {"widths": [4]}},
        r"'name'.*plain name": {**_study(), "name": "../x"},
    }  # fmt: skip
    for message, raw in bad.items():
        with pytest.raises(LmcError, match=message):
            resolve(raw)
    with pytest.raises(LmcError, match=r"'onset.pairs' in s.toml"):
        resolve(_study(pairs=0), source="s.toml")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_captured_states_are_the_run_train_run_makes(tmp_path, digits, precision):
    study = resolve(_study({"precision": precision}))
    config = train_config(study, 3, digits)
    states, model, history = train_capturing(config, digits, [0, 1, 3])
    assert sorted(states) == [0, 1, 3] and len(history) == 3
    run, reused = train_run(config, store=RunStore(tmp_path / "runs"), data=digits)
    assert not reused
    stored = run.state_dict()
    assert stored.keys() == states[3].keys()
    assert all(torch.equal(stored[k], states[3][k]) for k in stored)  # exact, not close
    init = build(config["model"], seed=3, **config["model_options"]).state_dict()
    assert all(torch.equal(init[k], states[0][k]) for k in init)  # epoch 0: the initialisation
    assert not all(torch.equal(states[0][k], states[1][k]) for k in init)
    assert not all(torch.equal(states[1][k], states[3][k]) for k in init)
    # a captured state is a copy: the model trained on does not write into it
    assert all(torch.equal(model.state_dict()[k], states[3][k]) for k in init)
    assert all(states[3][k].data_ptr() != model.state_dict()[k].data_ptr() for k in init)


def test_a_tiny_study_writes_its_files_reuses_and_resumes(tmp_path, digits, capsys):
    study = resolve(_study(pairs=1, epochs=[0, 1, 3], lambdas=3))
    out, runs = tmp_path / "out", tmp_path / "runs"
    first = run_study(study, out, runs_dir=runs, toml_text="# t\n")
    assert first["experiment"] == "onset" and first["status"] == "finished"
    assert first["jobs"] == {"total": 1, "reused": 0, "run": 1}
    streams = capsys.readouterr()
    assert "onset: pair 0 epoch 3" in streams.err and "onset:" not in streams.out
    recorded = json.loads((out / "study.json").read_text())
    assert recorded["config"] == study and recorded["files"]["onset"] == "onset.csv"
    assert (out / "study.toml").read_text() == "# t\n"

    barriers = read_csv(out / "barriers.csv")
    paths = read_csv(out / "onset.csv")
    assert [(int(r["epoch"]), r["method"]) for r in barriers] == [
        (e, m) for e in (0, 1, 3) for m in ("none", "weight")
    ]
    assert len(paths) == 3 * 2 * 3 and {r["lam"] for r in paths} == {0.0, 0.5, 1.0}
    for row in barriers:
        path = sorted(
            (r for r in paths if r["epoch"] == row["epoch"] and r["method"] == row["method"]),
            key=lambda r: r["lam"],
        )
        losses = [r["loss"] for r in path]
        assert row["loss_a"] == losses[0] and row["loss_b"] == losses[-1]
        assert row["accuracy_a"] == path[0]["accuracy"]
        assert row["max_minus_mean_loss"] == pytest.approx(
            max(losses) - 0.5 * (losses[0] + losses[-1]), abs=1e-12
        )
        assert row["loss_barrier"] >= 0 and row["max_minus_mean_loss"] >= 0
        assert all(r["max_minus_mean_loss"] == row["max_minus_mean_loss"] for r in path)
        assert math.isnan(row["calibrated_loss_barrier"])  # calibrate = false
    # weight matching moves B's units but not its function: both endpoints agree with `none`
    for epoch in (0, 1, 3):
        none, weight = (
            next(r for r in barriers if r["epoch"] == epoch and r["method"] == m)
            for m in ("none", "weight")
        )
        assert weight["loss_a"] == none["loss_a"]
        assert weight["loss_b"] == pytest.approx(none["loss_b"], rel=1e-5)
        assert weight["accuracy_b"] == pytest.approx(none["accuracy_b"], abs=1 / 450)
        assert weight["moved_fraction"] > 0 and math.isnan(none["moved_fraction"])
    # the final epoch's endpoints are the models saved in the run store, which are exactly
    # what train_run makes for the same configs in a store of its own
    job = json.loads(next((out / "jobs").iterdir()).read_text())
    assert job["stored"]["A"]["saved"] and job["stored"]["B"]["saved"]
    last = next(r for r in barriers if r["epoch"] == 3 and r["method"] == "none")
    for side, key in (("A", "run_a"), ("B", "run_b")):
        saved = RunStore(runs).find(job["job"][key])
        fresh, _ = train_run(job["job"][key], store=RunStore(tmp_path / "fresh"), data=digits)
        a, b = saved.state_dict(), fresh.state_dict()
        assert all(torch.equal(a[k], b[k]) for k in a)
        test = evaluate(saved.build_model(), digits.x_test, digits.y_test)
        assert test["loss"] == pytest.approx(last[f"loss_{side.lower()}"], rel=1e-6)

    before = (out / "barriers.csv").read_text()
    again = run_study(study, out, runs_dir=runs)
    assert again["jobs"] == {"total": 1, "reused": 1, "run": 0}
    assert (out / "barriers.csv").read_text() == before

    two = resolve(_study(pairs=2, epochs=[0, 1, 3], lambdas=3))
    both = run_study(two, out, runs_dir=runs, quiet=True)
    assert both["jobs"] == {"total": 2, "reused": 1, "run": 1}  # pair 0 is the same job
    later = next(p for p in (out / "jobs").iterdir() if p.stem == both["job_ids"][1])
    later.unlink()  # as if interrupted during pair 1: it resumes there
    resumed = run_study(two, out, runs_dir=runs, quiet=True)
    assert resumed["jobs"] == {"total": 2, "reused": 1, "run": 1}
    rows = read_csv(out / "barriers.csv")
    assert {int(r["pair"]) for r in rows} == {0, 1} and {r["seed_b"] for r in rows} == {1, 3}

    written = write_report(out)
    text = Path(written["report_md"]).read_text()
    assert [Path(p).name for p in written["figures"]] == ["onset.png"]
    assert Path(written["figures"][0]).with_suffix(".svg").is_file()
    assert "<img" in Path(written["report_html"]).read_text()
    assert "figures/onset.png" in text and "Fig. 3" in text
    assert verdict(summarise(rows)) in text
    mean_last = sum(
        r["max_minus_mean_loss"] for r in rows if r["epoch"] == 3 and r["method"] == "weight"
    )
    assert f"{mean_last / 2:.3f} nats at epoch 3" in text


def _rows(barriers: dict[str, list[float]]) -> list[dict]:
    """barriers.csv-like rows of one pair: method -> loss barrier per epoch 0, 1, 2."""
    return [
        {"pair": 0, "epoch": e, "method": m, "max_minus_mean_loss": v, "loss_barrier": v,
         "accuracy_barrier": 0.1, "accuracy_a": 0.9, "accuracy_b": 0.9}
        for m, values in barriers.items() for e, v in enumerate(values)
    ]  # fmt: skip


def test_the_verdict_follows_the_numbers():
    text = verdict(summarise(_rows({"none": [0.0, 1.0, 1.2], "weight": [0.0, 0.8, 0.1]})))
    assert text.startswith("**Confirmed after initialisation, not at it:**")
    assert "0.800 nats" in text and "8.3 %" in text and "80 % of the naive" in text
    text = verdict(summarise(_rows({"none": [1.0, 1.0, 1.2], "weight": [0.9, 0.8, 0.1]})))
    assert text.startswith("**Confirmed:**") and "0.900 nats at its largest" in text
    text = verdict(summarise(_rows({"none": [0.0, 1.0, 1.2], "weight": [0.0, 0.5, 0.9]})))
    assert text.startswith("**Not confirmed:**")
    text = verdict(summarise(_rows({"none": [0.0, 1.0, 0.2], "weight": [0.0, 0.8, 0.15]})))
    assert text.startswith("**Partly confirmed:**") and "naive barrier" in text
    assert verdict(summarise(_rows({"weight": [0.0, 0.8, 0.1]}))).startswith("**No verdict:**")


def test_the_paired_sentence_compares_the_pairs_at_the_last_epoch():
    # three pairs; at epoch 2 weight − none is −1.0, −1.1, −0.9 per pair: mean −1.0, sample
    # std 0.1, 95 % half-width t(0.975, 2) · 0.1 / √3 = 4.303 · 0.0577 = 0.248
    rows = [
        {**r, "pair": p}
        for p, shift in enumerate((0.0, 0.1, -0.1))
        for r in _rows({"none": [0.0, 1.0, 1.2 + shift], "weight": [0.0, 0.8, 0.2]})
    ]
    text = paired_sentence(rows)
    assert "at epoch 2" in text and "lower in every pair: −1.00 ± 0.25" in text, text
    assert (
        paired_sentence(_rows({"none": [0.0, 1.0, 1.2], "weight": [0.0, 0.8, 0.1]})).count(
            "too few pairs"
        )
        == 1
    )  # one pair: no verdict
    assert paired_sentence(_rows({"none": [0.0, 1.0]})) == ""


def test_table_cells_show_the_95_percent_interval_not_the_std():
    # mean 1.0, sample std 0.1 over 3 pairs: h = 4.303 · 0.1 / √3 = 0.248
    assert _cell((1.0, 0.1, 3), 1.0, 3) == "1.000 ± 0.248"
    assert _cell((1.0, 0.0, 1), 1.0, 3) == "1.000"  # one pair: no interval


def test_the_packaged_recipe_is_an_onset_study():
    study, text = load_study("rebasin-onset-fmnist-mlp")
    assert study["experiment"] == "onset" and study["name"] == "rebasin-onset-fmnist-mlp"
    assert study["onset"]["epochs"] == [0, 1, 2, 3, 5, 10] and "Fig. 3" in text
    spawning, _ = load_study("llfc-spawning-fmnist-mlp")
    first = spawning["variants"][0]["study"]
    assert study["train"] == first["train"] and study["model"] == first["model"]
    assert [study["onset"]["weight_decay"]] == first["sweep"]["weight_decays"]


def test_docs_document_every_setting():
    text = DOCS.read_text()
    section = text.split('experiment = "onset"', 1)[1].split("\n## ", 1)[0]
    for key, (_, default) in SETTINGS.items():
        match = re.search(rf"^\| `{key}` \| [^|]+ \| ([^|]+) \|", section, flags=re.M)
        assert match, key
        cell = match.group(1).strip()
        if default is ...:
            assert cell == "required", key
        elif default is None:
            assert cell.startswith("every epoch"), key
        else:  # the default as the study file writes it
            assert tomllib.loads(f"x = {cell.strip('`')}")["x"] == default, key
