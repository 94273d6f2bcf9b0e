"""`lmc analyze`: JSON contract, files written, table, run lookup and clear errors."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from lmc.analysis import RECORD_KEYS
from lmc.cli.main import main
from lmc.models import build
from lmc.store import RunStore, load_tensors
from lmc.train import make_config


def _save_run(store: RunStore, seed: int, width: int = 16):
    config = make_config(
        "digits", "mlp", {"width": width, "depth": 2}, epochs=1, init_seed=seed, data_seed=seed
    )
    model = build(config["model"], seed=seed, **config["model_options"])
    return store.save(config, model.state_dict(), {"final_test_accuracy": 0.1})


@pytest.fixture()
def runs(tmp_path):
    store = RunStore(tmp_path / "runs")
    return store, _save_run(store, 1), _save_run(store, 2)


def test_json_and_files(runs, tmp_path, capsys):
    store, a, b = runs
    out = tmp_path / "out"
    code = main(
        [
            "analyze",
            str(a.path),
            str(b.path),
            "--json",
            "--quiet",
            "--lam",
            "0.25,0.5",
            "--max-examples",
            "100",
            "--batch-size",
            "32",
            "--out",
            str(out),
            "--device",
            "cpu",
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    payload = json.loads(captured.out)  # exactly one JSON object on stdout
    assert set(payload) == {"layers", "settings", "theory"}
    layers = payload["layers"]
    assert len(layers) == 2 * 3 and [r["lam"] for r in layers] == [0.25] * 3 + [0.5] * 3
    assert all(set(r) == set(RECORD_KEYS) for r in layers)
    assert layers[0]["n_examples"] == 100
    assert layers[0]["commutativity_relative"] is None  # 0/0 in the input layer -> null
    settings = payload["settings"]
    assert settings["split"] == "test" and settings["align"] == "none"
    assert settings["run_a"] == str(a.path)
    theory = payload["theory"]
    assert theory["gaussian_relu_limit"] == pytest.approx(0.9304, abs=1e-4)
    assert set(theory["gaussian_relu_cosine"]) == {"16"}

    for name in (
        "layers.csv",
        "summary.json",
        "units.safetensors",
        "cosines.png",
        "moments.png",
        "spectra.png",
    ):
        assert (out / name).stat().st_size > 0, name
    with open(out / "layers.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 6 and list(rows[0]) == list(RECORD_KEYS)
    assert float(rows[2]["lewc_cosine"]) == pytest.approx(layers[2]["lewc_cosine"])
    text = (out / "summary.json").read_text()
    assert "NaN" not in text and json.loads(text)["layers"] == layers
    units = load_tensors(out / "units.safetensors")
    assert units["moments.layer1.a"].shape == (16,)
    assert units["spectra.logits.b"].shape == (10,)


def test_table_and_run_names(runs, capsys):
    store, a, b = runs
    code = main(
        [
            "analyze",
            a.name,
            b.name,
            "--runs-dir",
            str(store.root),
            "--quiet",
            "--max-examples",
            "50",
            "--device",
            "cpu",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "lewc" in out and "weak_add" in out and "recip" in out
    assert out.count("\nlayer") == 2 and "logits" in out
    assert "LEWC prediction" in out


def test_incompatible_runs_are_one_line_errors(runs, capsys):
    store, a, _ = runs
    wide = _save_run(store, 3, width=20)
    assert main(["analyze", str(a.path), str(wide.path), "--quiet", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model_options" in err
    assert main(["analyze", str(a.path), "no-such-run", "--quiet", "--device", "cpu"]) == 2
    assert "not a run folder" in capsys.readouterr().err
    assert main(["analyze", str(a.path), str(a.path), "--lam", "x", "--device", "cpu"]) == 2


def test_align_without_lmc_perm_align_is_a_clear_error(runs, capsys):
    import lmc.perm

    if hasattr(lmc.perm, "align"):
        pytest.skip("lmc.perm.align exists: covered by test_align_weight_undoes_a_permutation")
    store, a, b = runs
    code = main(
        ["analyze", str(a.path), str(b.path), "--align", "weight", "--quiet", "--device", "cpu"]
    )
    assert code == 2
    assert "lmc.perm.align" in capsys.readouterr().err


def test_align_weight_undoes_a_permutation(runs, capsys):
    """B = a random permutation of A: low endpoint cosines as it is, cosines 1 once aligned."""
    perm = pytest.importorskip("lmc.perm")
    if not hasattr(perm, "align"):
        pytest.skip("lmc.perm has no align yet")
    store, a, _ = runs
    model = a.build_model()
    spec = perm.spec_from_model(model, torch.zeros(2, 1, 8, 8))
    permuted = perm.apply_permutation(
        spec, perm.random_permutation(spec, seed=5), model.state_dict()
    )
    config = {**a.config, "kind": "permuted"}
    b = store.save(config, permuted, {})

    def analyse(*extra):
        code = main(
            [
                "analyze",
                str(a.path),
                str(b.path),
                "--json",
                "--quiet",
                "--device",
                "cpu",
                "--max-examples",
                "200",
                *extra,
            ]
        )
        assert code == 0
        return json.loads(capsys.readouterr().out)

    plain = analyse()["layers"]
    assert max(r["endpoint_cosine"] for r in plain if r["kind"] == "hidden") < 0.9
    aligned = analyse("--align", "weight")
    assert aligned["settings"]["align"] == "weight" and aligned["settings"]["aligned"]
    for r in aligned["layers"]:
        assert r["llfc_cosine"] == pytest.approx(1.0, abs=1e-6)
        assert r["lewc_cosine"] == pytest.approx(1.0, abs=1e-6)
    assert main(["analyze", str(a.path), str(b.path), "--align", "bogus", "--quiet"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
