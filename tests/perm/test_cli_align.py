"""``lmc align`` end to end on two tiny trained digits runs in a temporary store."""

from __future__ import annotations

import json
import re

import pytest
import torch

from lmc.cli.main import build_parser, main
from lmc.perm import apply_permutation, spec_from_model
from lmc.store import RunStore, load_run, load_tensors, read_json

OPTIONS = dict(input_size=64, width=16, depth=2)
INFO_KEYS = {"method", "seed", "objective_before", "objective_after", "moved_fraction", "seconds"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, digits, save_digits_run):
    """Two digits MLPs of width 16 and one of width 20, trained two epochs, in a store."""
    root = tmp_path_factory.mktemp("runs")
    store = RunStore(root)
    a, b = (save_digits_run(store, digits, seed, OPTIONS, epochs=2) for seed in (1, 2))
    wide = save_digits_run(store, digits, 3, dict(OPTIONS, width=20), epochs=2)
    return root, a.path, b.path, wide.path


def test_align_writes_a_new_run_and_reuses_it(runs, capsys, digits):
    root, a, b, _ = runs
    argv = ["align", str(a), str(b), "--runs-dir", str(root), "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().out.strip().splitlines()
    run_dir = out[-1]
    assert "objective" in " ".join(out) and re.search(r"fc1\s+16\s+[01]\.\d{3}", "\n".join(out))
    aligned = load_run(run_dir)
    assert aligned.config["kind"] == "aligned"
    assert aligned.config["align"] == {
        "method": "weight",
        "seed": 0,
        "reference": a.name,
        "source": b.name,
        "max_iter": 100,
        "tol": 1e-4,
        "init": "onepass",  # the defaults; identity and scipy would be left out
        "solver": "auto",
    }
    assert aligned.config["model_options"] == OPTIONS
    metrics = aligned.metrics
    assert metrics["status"] == "finished" and "environment" in metrics
    assert metrics["align"]["objective_after"] > metrics["align"]["objective_before"]
    # the stored permutation, applied to B, gives the stored state; the function is B's
    model_b = load_run(b).build_model()
    perm = load_tensors(aligned.path / "perm.safetensors")
    spec = spec_from_model(model_b, digits.x_train[:2])
    expected = apply_permutation(spec, perm, model_b.state_dict())
    for k, v in aligned.state_dict().items():
        assert torch.equal(v, expected[k]), k
    with torch.no_grad():
        assert torch.allclose(
            aligned.build_model()(digits.x_test), model_b(digits.x_test), atol=1e-5
        )
    summary = read_json(aligned.path / "perm.json")
    assert set(summary["groups"]) == {"fc1", "fc2"}
    assert summary["groups"]["fc1"]["size"] == 16
    assert "fc2.weight[1]" in summary["groups"]["fc1"]["members"]
    # the same command again reuses the run
    assert main(argv) == 0
    again = capsys.readouterr().out.strip().splitlines()
    assert "reusing" in again[0] and again[-1] == run_dir


def test_align_json_for_every_method(runs, capsys):
    root, a, b, _ = runs
    keys = {"run_dir", *INFO_KEYS, "reference", "source"}
    dirs = set()
    for method, extra in (
        ("weight", []),
        ("activation", ["--max-examples", "300"]),
        ("ste", ["--ste-steps", "3"]),
        ("random", ["--seed", "2"]),
    ):
        argv = [
            "align",
            str(a),
            str(b),
            "--runs-dir",
            str(root),
            "--method",
            method,
            "--json",
            *extra,
        ]
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert len(out.strip().splitlines()) == 1
        record = json.loads(out)
        assert keys <= set(record) and record["method"] == method
        assert record["reference"] == a.name and record["source"] == b.name
        assert set(record["moved_fraction"]) == {"fc1", "fc2"}
        dirs.add(record["run_dir"])
    assert len(dirs) == 4
    config = load_run(
        next(d for d in dirs if "activation" in read_json(f"{d}/config.json")["align"]["method"])
    ).config
    assert config["align"]["max_examples"] == 300
    assert config["align"]["statistic"] == "correlation"


def test_align_init_restarts_and_solver_enter_the_config_only_away_from_earlier_runs(runs, capsys):
    root, a, b, _ = runs
    base = ["align", str(a), str(b), "--runs-dir", str(root), "--quiet", "--json"]
    assert main([*base, "--init", "onepass", "--restarts", "3"]) == 0
    config = load_run(json.loads(capsys.readouterr().out)["run_dir"]).config["align"]
    assert config["init"] == "onepass" and config["restarts"] == 3
    # the values every earlier aligned run had (identity start, SciPy): neither key, so those
    # runs are found again
    old = [*base, "--init", "identity", "--solver", "scipy"]
    assert main(old) == 0
    out = json.loads(capsys.readouterr().out)
    plain = load_run(out["run_dir"]).config["align"]
    assert "init" not in plain and "restarts" not in plain and plain["method"] == "weight"
    assert "solver" not in plain
    # the defaults (one-pass start, solver auto) are in the config: a new run
    assert main(base) == 0
    default = json.loads(capsys.readouterr().out)
    config = load_run(default["run_dir"]).config["align"]
    assert config["init"] == "onepass" and config["solver"] == "auto"
    assert default["run_dir"] != out["run_dir"]


def test_align_errors_are_one_line(runs, capsys, tmp_path, cli_error):
    root, a, b, wide = runs
    message = cli_error(["align", str(a), str(tmp_path / "missing"), "--runs-dir", str(root)])
    assert "missing" in message and "not a run folder" in message
    message = cli_error(["align", str(a), str(wide), "--runs-dir", str(root)])
    assert "fc1.weight" in message and "(16, 64)" in message and "(20, 64)" in message
    message = cli_error(["align", str(a), str(b), "--method", "magic"])
    assert "magic" in message and "weight" in message
    message = cli_error(
        ["align", str(a), str(b), "--method", "activation", "--statistic", "median"]
    )
    assert "median" in message


def test_align_help_documents_every_option(capsys):
    with pytest.raises(SystemExit):
        main(["align", "--help"])
    text = capsys.readouterr().out
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "verb").choices["align"]
    for action in sub._actions:
        if action.dest == "help":
            continue
        assert action.help, action.dest
        for flag in action.option_strings:
            assert flag in text
    for flag in (
        "--method",
        "--seed",
        "--json",
        "--runs-dir",
        "--device",
        "--quiet",
        "--data-dir",
        "--download",
        "--max-examples",
        "--ste-steps",
    ):
        assert flag in text
