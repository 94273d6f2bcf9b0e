"""Connectivity along training in the onset study (Sharma et al. 2024): ``[onset] alignment =
["weak", "strong"]`` measures each epoch's pair with its own weight matching (weak) and with the
one found between the final models (strong), at one width or a list of them; the settings of a
study without them keep their job ids and files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lmc.config import LmcError, config_hash
from lmc.experiments import load_study, read_csv, resolve, run_study
from lmc.experiments.onset_study import KIND, pair_job, train_capturing
from lmc.models import build
from lmc.perm import align
from lmc.report import write_report
from lmc.report.onset import STRONG, by_width, strong_sentence, summarise
from lmc.train.evaluate import evaluate

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def _study(**settings):
    return {
        "name": "onset-strong-test",
        "experiment": "onset",
        "data": {"dataset": "digits"},
        "model": {"name": "mlp", "depth": 2},
        "train": {"epochs": 3, "batch_size": 64},
        "onset": {"width": 16, "pairs": 1, "epochs": [0, 1, 3], "lambdas": 3, **settings},
    }


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_alignment_and_width_lists_are_checked():
    assert resolve(_study())["onset"]["alignment"] == ["weak"]
    assert resolve(_study(alignment=["strong", "weak"]))["onset"]["alignment"] == [
        "weak",
        "strong",
    ]
    assert resolve(_study(width=[32, 16]))["onset"]["width"] == [16, 32]
    bad = {
        r"'onset.alignment' must list weak, strong or both": _study(alignment=["simultaneous"]),
        r"'onset.alignment' must list weak": _study(alignment=[]),
        r"'onset.alignment' lists a connectivity twice": _study(alignment=["weak", "weak"]),
        r"strong connectivity .* orthogonal": _study(
            methods=["none", "orthogonal"], alignment=["weak", "strong"]
        ),
        r"'onset.width' is an empty list": _study(width=[]),
        r"'onset.width' lists a width twice": _study(width=[16, 16]),
        r"'onset.width'.*positive": _study(width=[16, -1]),
    }
    for message, raw in bad.items():
        with pytest.raises(LmcError, match=message):
            resolve(raw)


def test_old_settings_keep_their_job_ids(digits):
    ids = json.loads((RESULTS / "rebasin-onset-fmnist-mlp" / "study.json").read_text())["job_ids"]
    study, _ = load_study("rebasin-onset-fmnist-mlp")
    assert study["onset"]["alignment"] == ["weak"]
    assert [f"{KIND}-{config_hash(pair_job(study, p, None))}" for p in range(3)] == ids
    # weak written out, or one width as a list, is the same job; strong is another
    plain = pair_job(resolve(_study()), 0, digits)
    assert pair_job(resolve(_study(alignment=["weak"])), 0, digits) == plain
    assert pair_job(resolve(_study(width=[8, 16])), 0, digits, 16) == plain
    assert pair_job(resolve(_study(width=[8, 16])), 0, digits, 8) != plain
    strong = pair_job(resolve(_study(alignment=["weak", "strong"])), 0, digits)
    assert config_hash(strong) != config_hash(plain) and strong["alignment"] == ["weak", "strong"]


def _permuted(state: dict[str, torch.Tensor], perm: dict[str, torch.Tensor]):
    """A depth-2 MLP's state with its hidden units permuted by hand (new unit i = old p[i])."""
    p1, p2 = perm["fc1"].cpu(), perm["fc2"].cpu()
    return {
        "fc1.weight": state["fc1.weight"][p1],
        "fc1.bias": state["fc1.bias"][p1],
        "fc2.weight": state["fc2.weight"][p2][:, p1],
        "fc2.bias": state["fc2.bias"][p2],
        "out.weight": state["out.weight"][:, p2],
        "out.bias": state["out.bias"],
    }


def test_strong_applies_the_final_alignment_at_every_epoch(tmp_path, digits):
    study = resolve(_study(width=[16], alignment=["weak", "strong"]))
    out = tmp_path / "out"
    record = run_study(study, out, runs_dir=tmp_path / "runs", quiet=True)
    rows = read_csv(out / "barriers.csv")
    header = (out / "barriers.csv").read_text().splitlines()[0].split(",")
    assert header[:7] == ["pair", "width", "epoch", "method", "connectivity", "seed_a", "seed_b"]
    assert [(r["epoch"], r["method"], r["connectivity"]) for r in rows] == [
        (e, m, c)
        for e in (0, 1, 3)
        for m, c in (("none", "weak"), ("weight", "weak"), ("weight", "strong"))
    ]
    assert {r["width"] for r in rows} == {16}
    paths = read_csv(out / "onset.csv")
    assert len(paths) == 3 * 3 * 3 and {r["connectivity"] for r in paths} == {"weak", "strong"}

    def row(epoch, connectivity):
        return next(
            r
            for r in rows
            if r["epoch"] == epoch and r["method"] == "weight" and r["connectivity"] == connectivity
        )

    def path(epoch, connectivity):
        return [
            r["loss"]
            for r in paths
            if r["epoch"] == epoch and r["method"] == "weight" and r["connectivity"] == connectivity
        ]

    # at the final epoch the final alignment is the epoch's own: the same path, exactly
    weak, strong = row(3, "weak"), row(3, "strong")
    assert {k: v for k, v in weak.items() if k != "connectivity"} == {
        k: v for k, v in strong.items() if k != "connectivity"
    }
    assert path(3, "weak") == path(3, "strong")

    # at epoch 0 strong is B's initialisation under the final models' permutation
    job = json.loads((out / "jobs" / f"{record['job_ids'][0]}.json").read_text())["job"]
    states = {}
    for side in ("run_a", "run_b"):
        states[side], _, _ = train_capturing(job[side], digits, [0, 3])
    config = job["run_a"]

    def model(state):
        net = build(config["model"], **config["model_options"])
        net.load_state_dict(state)
        return net.eval()

    x = digits.x_train[:2000]  # the study's align_examples reach every digits training example
    final = align(
        "weight",
        model(states["run_a"][3]),
        model(states["run_b"][3]),
        inputs=x,
        seed=0,
        init="identity",
        solver="scipy",
    ).perm
    init_a, init_b = states["run_a"][0], states["run_b"][0]
    moved = _permuted(init_b, final)
    midpoint = {k: 0.5 * (init_a[k] + moved[k]) for k in init_a}
    measured = evaluate(model(midpoint), digits.x_test, digits.y_test)
    assert row(0, "strong")["midpoint_loss"] == pytest.approx(measured["loss"], rel=1e-6)
    assert row(0, "strong")["midpoint_accuracy"] == pytest.approx(measured["accuracy"], abs=1e-9)
    # ... which is not B's initialisation under epoch 0's own permutation (weak)
    own = align("weight", model(init_a), model(init_b), inputs=x, init="identity", solver="scipy")
    assert any(not torch.equal(own.perm[g], final[g]) for g in final)
    assert row(0, "weak")["midpoint_loss"] != row(0, "strong")["midpoint_loss"]
    # the permutation keeps B's function: both endpoints as without alignment
    naive = next(r for r in rows if r["epoch"] == 0 and r["method"] == "none")
    assert row(0, "strong")["loss_b"] == pytest.approx(naive["loss_b"], rel=1e-5)
    assert row(0, "strong")["moved_fraction"] == row(3, "weak")["moved_fraction"]

    # the report: strong beside weak, per width
    text = Path(write_report(out)["report_md"]).read_text()
    summaries = {w: summarise(mine) for w, mine in by_width(rows).items()}
    assert list(summaries) == [16] and "weight" + STRONG in summaries[16]
    assert strong_sentence(summaries[16]) in text and "Width 16" in text
    assert "weight matching, strong" in text


def test_a_file_without_the_new_columns_reads_as_weak_at_one_width():
    rows = [
        {"pair": 0, "epoch": e, "method": m, "max_minus_mean_loss": v, "loss_barrier": v,
         "accuracy_barrier": 0.1, "accuracy_a": 0.9, "accuracy_b": 0.9}
        for m, values in {"none": [0.0, 1.0], "weight": [0.0, 0.2]}.items()
        for e, v in enumerate(values)
    ]  # fmt: skip
    assert by_width(rows, 512) == {512: rows}
    summary = summarise(rows)
    assert list(summary) == ["none", "weight"] and strong_sentence(summary) == ""
    strong = [
        {**r, "connectivity": "strong", "max_minus_mean_loss": 0.1 + r["max_minus_mean_loss"]}
        for r in rows
        if r["method"] == "weight"
    ]
    summary = summarise([{**r, "connectivity": "weak"} for r in rows] + strong)
    assert list(summary) == ["none", "weight", "weight" + STRONG]
    sentence = strong_sentence(summary)
    assert (
        "(strong connectivity) the barrier is at most 0.5 of the naive one from epoch 1" in sentence
    )
    assert "(weak) from epoch 0 on" in sentence and "0.300 nats (strong) against 0.200" in sentence
