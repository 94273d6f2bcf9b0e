"""``lmc merge`` end to end on tiny digits runs in a temporary store."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from lmc.cli.main import main
from lmc.merge import reset_batchnorm
from lmc.models import build
from lmc.store import RunStore, load_run, load_tensors, read_json

OPTIONS = dict(input_size=64, width=16, depth=2)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return root, RunStore(root)


def test_merge_of_permuted_copies_is_the_model_and_is_reused(
    store, digits, capsys, tmp_path, save_permuted_runs
):
    root, st = store
    model, runs = save_permuted_runs(st, digits, OPTIONS, (21, 22))
    argv = ["merge", *(str(r.path) for r in runs), "--runs-dir", str(root), "--quiet"]
    argv += ["--out", str(tmp_path / "out"), "--device", "cpu"]
    assert main(argv) == 0
    out = capsys.readouterr().out.strip().splitlines()
    merged = load_run(out[-1])
    assert merged.config["kind"] == "merged"
    assert merged.config["train"] == runs[0].config["train"]  # the first run's config ...
    assert merged.config["merge"] == {  # ... plus the record of the merge
        "align": "weight",
        "bn": "auto",
        "seed": 0,
        "max_rounds": 100,
        "max_iter": 100,
        "tol": 1e-4,
        "runs": [r.name for r in runs],
    }
    record = merged.metrics["merge"]
    assert record["converged"] and record["bn_resolved"] == "none"
    x = digits.x_test
    with torch.no_grad():
        torch.testing.assert_close(merged.build_model()(x), model(x), atol=1e-5, rtol=0)
    assert record["merged"]["test_accuracy"] == pytest.approx(record["inputs"][0]["test_accuracy"])
    perms = load_tensors(merged.path / "perms.safetensors")
    assert {"0.fc1", "0.fc2", "2.fc1", "2.fc2"} <= set(perms)
    assert read_json(tmp_path / "out" / "merge.json")["run_dir"] == str(merged.path)
    assert any("merged" in line and "ECE" not in line for line in out)
    # again: the identical run is reused, and --json says so
    assert main([*argv, "--json"]) == 0
    reply = json.loads(capsys.readouterr().out)
    assert reply["reused"] is True and reply["run_dir"] == str(merged.path)
    # --align none: the plain average of permuted copies is another function
    assert main([*argv[:-2], "--align", "none", "--device", "cpu"]) == 0
    plain = load_run(capsys.readouterr().out.strip().splitlines()[-1])
    assert plain.path != merged.path and plain.config["merge"]["align"] == "none"
    with torch.no_grad():
        assert (plain.build_model()(x) - model(x)).abs().max() > 1e-2


def test_batchnorm_merge_resets_statistics(store, digits, capsys, save_permuted_runs):
    root, st = store
    options = {**OPTIONS, "norm": "batch"}
    model, runs = save_permuted_runs(st, digits, options, (31,))
    argv = ["merge", *(str(r.path) for r in runs), "--runs-dir", str(root), "--quiet"]
    assert main([*argv, "--device", "cpu"]) == 0
    merged = load_run(capsys.readouterr().out.strip().splitlines()[-1])
    assert merged.metrics["merge"]["bn_resolved"] == "reset"
    expected = reset_batchnorm(copy.deepcopy(model), digits.x_train)
    x = digits.x_test
    with torch.no_grad():
        torch.testing.assert_close(merged.build_model()(x), expected(x), atol=1e-5, rtol=1e-5)
        assert (model(x) - expected(x)).abs().max() > 1e-4  # the reset did change something
    # --bn none keeps the averaged statistics: the model itself
    assert main([*argv, "--bn", "none", "--device", "cpu"]) == 0
    kept = load_run(capsys.readouterr().out.strip().splitlines()[-1])
    with torch.no_grad():
        torch.testing.assert_close(kept.build_model()(x), model(x), atol=1e-5, rtol=0)


def test_one_line_errors(store, digits, capsys, digits_run_config):
    root, st = store
    config = digits_run_config(OPTIONS, epochs=1, init_seed=41, data_seed=41)
    a = st.save(config, build("mlp", seed=1, **OPTIONS).state_dict(), {})
    wide_options = {**OPTIONS, "width": 20}
    config = digits_run_config(wide_options, epochs=1, init_seed=42, data_seed=42)
    b = st.save(config, build("mlp", seed=2, **wide_options).state_dict(), {})
    cases = [
        ([str(a.path), str(b.path)], "architecture"),
        ([str(a.path)], "at least two runs"),
        ([str(a.path), str(a.path), "--align", "magic"], "--align"),
        ([str(a.path), str(a.path), "--align", "activation", "--rounds", "1"], "--rounds"),
        ([str(a.path), str(a.path), "--bn", "repair"], "--bn"),
        ([str(a.path), str(root / "missing")], "missing"),
    ]
    for args, message in cases:
        assert main(["merge", *args, "--runs-dir", str(root), "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("lmc merge: error:") and message in err, err
        assert len(err.splitlines()) == 1
