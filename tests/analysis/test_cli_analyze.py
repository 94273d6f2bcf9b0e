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
    argv = ["analyze", str(a.path), str(b.path), "--json", "--quiet", "--lam", "0.25,0.5"]
    argv += ["--max-examples", "100", "--batch-size", "32", "--out", str(out), "--device", "cpu"]
    code = main(argv)
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
    assert len(err.splitlines()) == 1 and "'width' is 16 in RUN_A but 20" in err
    assert main(["analyze", str(a.path), "no-such-run", "--quiet", "--device", "cpu"]) == 2
    assert "not a run folder" in capsys.readouterr().err
    assert main(["analyze", str(a.path), str(a.path), "--lam", "x", "--device", "cpu"]) == 2


def test_align_weight_undoes_a_permutation(runs, capsys):
    """B = a random permutation of A: low endpoint cosines as it is, cosines 1 once aligned."""
    import lmc.perm as perm

    store, a, _ = runs
    model = a.build_model()
    spec = perm.spec_from_model(model, torch.zeros(2, 1, 8, 8))
    permuted = perm.apply_permutation(
        spec, perm.random_permutation(spec, seed=5), model.state_dict()
    )
    config = {**a.config, "kind": "permuted"}
    b = store.save(config, permuted, {})

    def analyse(*extra):
        argv = ["analyze", str(a.path), str(b.path), "--json", "--quiet", "--device", "cpu"]
        code = main([*argv, "--max-examples", "200", *extra])
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


def test_batchnorm_merge_is_analysed_with_reset_statistics():
    """With BatchNorm, the analysed merge has statistics recomputed, as evaluation uses it."""
    from lmc.analysis import analyze
    from lmc.merge import bn_aware_merge, lerp
    from lmc.models import build

    a = build("mlp", input_size=64, width=16, depth=2, norm="batch", seed=0).eval()
    b = build("mlp", input_size=64, width=16, depth=2, norm="batch", seed=1).eval()
    x = torch.randn(256, 64, generator=torch.Generator().manual_seed(0))
    for model in (a, b):  # give each endpoint its own statistics
        model.train()
        model(x * (2.0 if model is b else 1.0))
        model.eval()
    merge = bn_aware_merge(a, b, "auto", x)
    merged = merge(a.state_dict(), b.state_dict(), 0.5)
    naive = lerp(a.state_dict(), b.state_dict(), 0.5)
    assert not torch.allclose(merged["norm1.running_var"], naive["norm1.running_var"])
    assert bn_aware_merge(a, b, "none", x) is None
    with_reset = analyze(a, b, x, 0.5, merge_fn=merge, spectra=False).records
    plain = analyze(a, b, x, 0.5, spectra=False).records
    assert with_reset[0]["lewc_cosine"] != plain[0]["lewc_cosine"]


def test_repair_merge_equals_repair_of_the_interpolation():
    import copy

    from lmc.merge import bn_aware_merge, lerp, repair
    from lmc.models import build

    a = build("mlp", input_size=64, width=16, depth=2, norm="batch", seed=0).eval()
    b = build("mlp", input_size=64, width=16, depth=2, norm="batch", seed=1).eval()
    x = torch.randn(512, 64, generator=torch.Generator().manual_seed(0))
    merged = bn_aware_merge(a, b, "repair", x)(a.state_dict(), b.state_dict(), 0.3)
    reference = copy.deepcopy(a)
    reference.load_state_dict(lerp(a.state_dict(), b.state_dict(), 0.3))
    repair(reference, a, b, 0.3, x)
    for key, value in reference.state_dict().items():
        assert torch.allclose(merged[key].double(), value.double()), key
