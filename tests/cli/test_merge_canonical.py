"""``lmc interpolate --align canonical`` and ``lmc merge --align orthogonal|learned|canonical``
on tiny GPT runs trained on a text file (issue 42 items 3 and 4).

The canonical control's path runs between the canonical forms: its endpoints are the runs'
own losses (the canonical form keeps the function), its midpoint is another model than plain
averaging's. ``lmc merge`` beyond permutations writes a canonical-form run that evaluates,
reports the merge against the ensemble and each input, and merges a run and three permuted
copies of it back into the run's function."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from lmc.cli.main import main
from lmc.merge.many import build_run_model
from lmc.models import build
from lmc.perm import Alignment, apply_permutation, random_permutation, spec_from_model
from lmc.store import RunStore, load_run, load_tensors, read_json

GPT = ["--model", "gpt", "--width", "16", "--depth", "1", "--heads", "2", "--context", "16"]
FAST = ["--epochs", "4", "--optimizer", "adam", "--lr", "1e-2", "--quiet", "--device", "cpu"]
TEXT = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was "
    "the age of foolishness, it was the epoch of belief, it was the epoch of incredulity. "
) * 40


@pytest.fixture(scope="module")
def gpt_runs(tmp_path_factory):
    """Four GPT runs (seeds 1-4) trained for 4 epochs (28 Adam steps) on a text file, in a fresh
    store."""
    root = tmp_path_factory.mktemp("gpt-runs")
    corpus = root / "corpus.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    store = root / "runs"
    paths = []
    for seed in (1, 2, 3, 4):
        argv = ["train", *GPT, *FAST, "--data", str(corpus), "--runs-dir", str(store)]
        assert main([*argv, "--seed", str(seed), "--json"]) == 0
    paths = sorted(p for p in store.iterdir() if p.name.startswith("gpt-text"))
    by_seed = {load_run(p).config["train"]["init_seed"]: p for p in paths}
    return store, [by_seed[s] for s in sorted(by_seed)]


def _summary(capsys, argv, out) -> dict:
    assert main([*argv, "--out", str(out), "--quiet", "--device", "cpu"]) == 0, (
        capsys.readouterr().err
    )
    capsys.readouterr()
    return json.loads((out / "summary.json").read_text())


def test_interpolate_align_canonical_keeps_the_endpoints_and_moves_the_midpoint(
    gpt_runs, tmp_path, capsys
):
    _, (a, b, *_) = gpt_runs
    base = ["interpolate", str(a), str(b), "--lambdas", "3", "--no-calibrate"]
    plain = _summary(capsys, base, tmp_path / "plain")
    control = _summary(capsys, [*base, "--align", "canonical"], tmp_path / "canonical")
    assert control["align"] == "canonical" and control["align_info"]["canonical"] is True
    assert control["loss"][0] == pytest.approx(plain["loss"][0], rel=1e-5)
    assert control["loss"][-1] == pytest.approx(plain["loss"][-1], rel=1e-5)
    # folding the LayerNorms changes the parameters, so the midpoint is another model
    assert control["loss"][1] != pytest.approx(plain["loss"][1], rel=1e-4)


def _merge(capsys, store, runs, *flags) -> dict:
    argv = ["merge", *(str(r) for r in runs), "--runs-dir", str(store), "--device", "cpu"]
    code = main([*argv, "--quiet", "--json", *flags])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def test_merge_orthogonal_writes_a_canonical_run_against_the_ensemble_and_the_inputs(
    gpt_runs, capsys, tmp_path
):
    store, runs = gpt_runs
    reply = _merge(capsys, store, runs, "--align", "orthogonal", "--out", str(tmp_path / "o"))
    merged = load_run(reply["run_dir"])
    assert merged.config["kind"] == "merged" and merged.config["form"] == "canonical"
    assert merged.config["merge"] == {
        "align": "orthogonal",
        "bn": "auto",
        "seed": 0,
        "rounds": 0,
        "settings": {"max_iter": 20, "tol": 1e-10},  # the method's settings, in full
        "runs": [p.name for p in runs],
    }
    assert reply["canonical"] is True and len(reply["inputs"]) == 4
    assert reply["alignments"][0] is None and "objective_after" in reply["alignments"][1]
    for key in ("merged", "ensemble", *(f"input {i}" for i in range(4))):
        row = reply[key] if not key.startswith("input") else reply["inputs"][int(key[-1])]
        assert row["test_loss"] > 0 and 0 <= row["test_accuracy"] <= 1, key
    # each input's loss is its run's own (per token, on the test windows)
    for row, path in zip(reply["inputs"], runs):
        assert row["test_loss"] == pytest.approx(
            load_run(path).metrics["final_test_loss"], rel=1e-5
        )
    # the stored merge loads into the canonical form and gives the loss reported
    from lmc.metrics import classification_metrics
    from lmc.train.runs import load_run_data

    data = load_run_data(load_run(runs[0]))
    model = build_run_model(merged)
    with torch.no_grad():
        loss = classification_metrics(model(data.x_test), data.y_test, task=data.task)["loss"]
    assert loss == pytest.approx(reply["merged"]["test_loss"], rel=1e-5)
    # each input's alignment is stored, readable as an Alignment
    tensors = load_tensors(merged.path / "alignments.safetensors")
    described = read_json(merged.path / "alignments.json")
    assert len(described) == 4
    second = Alignment.from_tensors(
        {k[2:]: v for k, v in tensors.items() if k.startswith("1.")}, described[1]
    )
    assert "orthogonal" in second.kinds.values()
    assert read_json(tmp_path / "o" / "merge.json")["run_dir"] == reply["run_dir"]
    # again: reused
    assert _merge(capsys, store, runs, "--align", "orthogonal")["reused"] is True


def test_merge_learned_and_the_control_record_their_settings(gpt_runs, capsys):
    store, runs = gpt_runs
    learned = _merge(capsys, store, runs, "--align", "learned", "--learned-steps", "3",
                     "--align-examples", "120")  # fmt: skip
    config = load_run(learned["run_dir"]).config["merge"]
    assert config["settings"]["steps"] == 3 and config["settings"]["lr"] == 1e-2
    assert config["align_examples"] == 120
    assert learned["alignments"][1]["learned_best_step"] is not None
    control = _merge(capsys, store, runs, "--align", "canonical")
    assert "seed" not in load_run(control["run_dir"]).config["merge"]  # nothing random in it
    assert control["merged"]["test_loss"] != pytest.approx(learned["merged"]["test_loss"])
    # the plain average of text runs is evaluated per token too
    plain = _merge(capsys, store, runs, "--align", "none")
    assert "form" not in load_run(plain["run_dir"]).config
    assert plain["ensemble"]["test_loss"] > 0


def test_a_run_and_permuted_copies_merge_back_into_the_run(gpt_runs, capsys):
    store, runs = gpt_runs
    first = load_run(runs[0])
    model = first.build_model()
    from lmc.train.runs import load_run_data

    data = load_run_data(first)
    spec = spec_from_model(model, data.x_train[:2])
    st = RunStore(store)
    copies = [first.path]
    for seed in (11, 12, 13):
        state = apply_permutation(spec, random_permutation(spec, seed), model.state_dict())
        config = copy.deepcopy(first.config)
        config["train"]["init_seed"] = 100 + seed  # another run (its own folder), same model
        copies.append(st.save(config, state, {}).path)
    reply = _merge(capsys, store, copies, "--align", "orthogonal", "--rounds", "1")
    merged = build_run_model(load_run(reply["run_dir"]))
    x = data.x_test
    with torch.no_grad():
        want = model(x)
        assert float((merged(x) - want).abs().max() / want.abs().max()) < 1e-5
    assert reply["merged"]["test_loss"] == pytest.approx(reply["inputs"][0]["test_loss"], rel=1e-5)
    assert reply["shifts"][0] < 1e-5


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--align", "orthogonal", "--learned-steps", "3"], "is a setting of method 'learned'"),
        (["--align", "learned", "--rounds", "-1"], "--rounds must be at least 0"),
        (["--align", "orthogonal", "--align-examples", "-2"], "--align-examples"),
        (["--align", "magic"], "unknown --align 'magic'"),
    ],
)
def test_one_line_errors(gpt_runs, capsys, flags, message):
    store, runs = gpt_runs
    argv = ["merge", *(str(r) for r in runs[:2]), "--runs-dir", str(store), "--device", "cpu"]
    assert main([*argv, *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_help_says_the_merge_is_a_canonical_form_run(capsys):
    with pytest.raises(SystemExit):
        main(["merge", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert '"form": "canonical"' in text and "--learned-steps" in text


def test_a_canonical_merge_of_a_non_transformer_is_refused(tmp_path, capsys, digits):
    """An MLP has no LayerNorms to fold: a one-line error, nothing written."""
    from lmc.train import TrainSettings, fit

    store = RunStore(tmp_path / "runs")
    options = dict(input_size=64, width=8, depth=2)
    paths = []
    for seed in (1, 2):
        model = build("mlp", seed=seed, **options)
        fit(model, digits, TrainSettings(epochs=1, init_seed=seed, data_seed=seed))
        config = {"kind": "train", "dataset": "digits", "dataset_options": {}, "model": "mlp",
                  "model_options": dict(options), "train": {"init_seed": seed}}  # fmt: skip
        paths.append(store.save(config, model.state_dict(), {}).path)
    before = sorted(p.name for p in store.root.iterdir())
    argv = ["merge", *map(str, paths), "--runs-dir", str(store.root), "--align", "orthogonal"]
    assert main([*argv, "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "canonical" in err, err
    assert sorted(p.name for p in store.root.iterdir()) == before


def test_a_canonical_merged_run_is_evaluated_by_interpolate(gpt_runs, capsys, tmp_path):
    store, runs = gpt_runs
    reply = _merge(capsys, store, runs[:2], "--align", "orthogonal")
    merged = reply["run_dir"]
    base = ["interpolate", merged, merged, "--lambdas", "3", "--no-calibrate"]
    summary = _summary(capsys, base, tmp_path / "self")
    # a model against itself: every point of the path is the merged model, at its own loss
    assert summary["loss"][1] == pytest.approx(reply["merged"]["test_loss"], rel=1e-5)
    assert summary["loss"][0] == pytest.approx(summary["loss"][2], rel=1e-6)
