"""`lmc interpolate` end to end on two tiny digits runs in a temporary store."""

import csv
import json

import pytest

from lmc.cli.main import main
from lmc.metrics import BARRIER_KEYS
from lmc.store import RunStore

SUMMARY_KEYS = {
    "lambdas", "loss", "accuracy", "calibrated_loss", "inverse_temperature", "ensemble_loss",
    "ensemble_accuracy", "logit_norm", *BARRIER_KEYS, "align", "bn", "split",
    "calibration_seed", "calibration_fraction", "calibration_method", "calibration_folds",
    "run_a", "run_b", "environment",
}  # fmt: skip


def save_run(store, seed, width, digits_data, train_mlp, **options):
    x_tr = digits_data.x_train.flatten(1)
    model = train_mlp(seed, x_tr, digits_data.y_train, width=width, steps=80, **options)
    config = {
        "kind": "train",
        "dataset": "digits",
        "dataset_options": {},
        "model": "mlp",
        "model_options": {
            "input_size": 64,
            "num_classes": 10,
            "width": width,
            "depth": 3,
            **options,
        },
        "train": {"init_seed": seed, "data_seed": seed, "steps": 80},
    }
    return store.save(config, model.state_dict(), {"final_test_accuracy": None}).path


@pytest.fixture(scope="module")
def store_runs(tmp_path_factory, request):
    import lmc.data

    train_mlp = request.getfixturevalue("train_fn")
    data = lmc.data.load("digits")
    store = RunStore(tmp_path_factory.mktemp("runs"))
    return {
        "a": save_run(store, 0, 24, data, train_mlp),
        "b": save_run(store, 1, 24, data, train_mlp),
        "wide": save_run(store, 2, 32, data, train_mlp),
        "bn_a": save_run(store, 3, 24, data, train_mlp, norm="batch"),
        "bn_b": save_run(store, 4, 24, data, train_mlp, norm="batch"),
        "root": store.root,
    }


def test_json_summary_and_files(store_runs, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main([
        "interpolate", str(store_runs["a"]), str(store_runs["b"]), "--lambdas", "5",
        "--calibrate", "--baseline", "random-direction", "--json", "--quiet",
        "--device", "cpu", "--out", str(out), "--calibration-seed", "3",
    ])  # fmt: skip
    captured = capsys.readouterr()
    assert rc == 0
    summary = json.loads(captured.out)  # exactly one JSON object on stdout
    assert SUMMARY_KEYS <= set(summary)
    assert summary["lambdas"] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert summary["bn"] == "none" and summary["align"] == "none" and summary["split"] == "test"
    assert summary["calibration_seed"] == 3
    # digits' test split is small: the default calibration (auto) cross-fits over 5 folds
    assert summary["calibration_method"] == "crossfit" and summary["calibration_folds"] == 5
    assert summary["calibration_fraction"] is None
    assert summary["num_heldout"] == summary["num_examples"]  # every example scored once
    assert all(0.0 <= a <= 1.0 for a in summary["accuracy"])
    assert all(b > 0 for b in summary["inverse_temperature"])
    assert summary["calibrated_midpoint_loss_barrier"] is not None
    assert summary["baseline"]["kind"] == "random-direction"
    assert len(summary["baseline"]["loss"]) == 5
    assert summary["baseline"]["loss"][0] == summary["loss"][0]
    assert json.loads((out / "summary.json").read_text())["loss"] == summary["loss"]
    rows = list(csv.DictReader((out / "curve.csv").open()))
    assert [r["path"] for r in rows] == ["interpolation"] * 5 + ["random-direction"] * 5
    assert float(rows[2]["lambda"]) == 0.5
    assert float(rows[2]["loss"]) == pytest.approx(summary["loss"][2])
    assert (out / "path.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("flags", "method", "folds", "fraction"),
    [
        (["--calibration", "split"], "split", None, 0.2),
        (["--calibration", "crossfit", "--calibration-folds", "3"], "crossfit", 3, None),
    ],
)
def test_calibration_flags_choose_the_calibration(store_runs, tmp_path, capsys, flags, method,
                                                  folds, fraction):  # fmt: skip
    rc = main([
        "interpolate", str(store_runs["a"]), str(store_runs["b"]), "--lambdas", "3",
        "--calibrate", "--json", "--quiet", "--device", "cpu", "--out", str(tmp_path / "o"),
        *flags,
    ])  # fmt: skip
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["calibration_method"] == method and summary["calibration_folds"] == folds
    assert summary["calibration_fraction"] == fraction
    held = summary["num_examples"] - summary["num_calibration"] if method == "split" else None
    assert summary["num_heldout"] == (held or summary["num_examples"])


def test_bad_calibration_folds_are_a_one_line_error(store_runs, tmp_path, capsys):
    rc = main([
        "interpolate", str(store_runs["a"]), str(store_runs["b"]), "--calibrate", "--quiet",
        "--device", "cpu", "--calibration-folds", "1", "--out", str(tmp_path / "x"),
    ])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "calibration_folds" in err


def test_table_output_and_run_names_in_the_store(store_runs, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = main([
        "interpolate", store_runs["a"].name, store_runs["b"].name, "--runs-dir",
        str(store_runs["root"]), "--lambdas", "0.25,0.75", "--quiet", "--device", "cpu",
        "--max-examples", "200",
    ])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    assert "loss_barrier" in out and "200 test examples" in out
    assert len([line for line in out.splitlines() if line.startswith(" 0.")]) == 4
    folder = tmp_path / "interpolations" / f"{store_runs['a'].name}__{store_runs['b'].name}"
    assert (folder / "curve.csv").exists() and (folder / "path.png").exists()


def test_mismatched_runs_are_a_one_line_error(store_runs, tmp_path, capsys):
    rc = main([
        "interpolate", str(store_runs["a"]), str(store_runs["wide"]), "--quiet",
        "--device", "cpu", "--out", str(tmp_path / "x"),
    ])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1
    assert "'width' is 24 in RUN_A but 32 in RUN_B" in err
    assert not (tmp_path / "x").exists()


def test_weight_alignment_keeps_the_endpoints(store_runs, tmp_path, capsys):
    perm = pytest.importorskip("lmc.perm")
    if not hasattr(perm, "align"):
        pytest.skip("lmc.perm.align is not there yet")
    base = ["interpolate", str(store_runs["a"]), str(store_runs["b"]), "--lambdas", "3",
            "--json", "--quiet", "--device", "cpu"]  # fmt: skip
    assert main([*base, "--out", str(tmp_path / "plain")]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*base, "--align", "weight", "--out", str(tmp_path / "aligned")]) == 0
    aligned = json.loads(capsys.readouterr().out)
    assert aligned["align"] == "weight" and aligned["align_info"]["method"] == "weight"
    # permuting B does not change its function: same endpoint numbers, different midpoint
    assert aligned["loss"][0] == plain["loss"][0]
    assert aligned["loss"][-1] == pytest.approx(plain["loss"][-1], abs=1e-6)
    assert aligned["loss"][1] != pytest.approx(plain["loss"][1], abs=1e-6)


@pytest.mark.parametrize("mode", ["auto", "repair", "none"])
def test_batchnorm_modes_are_recorded(store_runs, tmp_path, capsys, mode):
    rc = main([
        "interpolate", str(store_runs["bn_a"]), str(store_runs["bn_b"]), "--lambdas", "3",
        "--bn", mode, "--json", "--quiet", "--device", "cpu", "--out", str(tmp_path / mode),
    ])  # fmt: skip
    summary = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert summary["bn"] == {"auto": "reset", "repair": "repair", "none": "none"}[mode]
    assert summary["method"] == ("batched" if mode == "none" else "loop")
    assert json.loads((tmp_path / mode / "summary.json").read_text())["bn"] == summary["bn"]


def test_stitch_flag_reports_the_stitched_errors(store_runs, tmp_path, capsys):
    base = ["interpolate", str(store_runs["a"]), str(store_runs["b"]), "--lambdas", "3",
            "--quiet", "--device", "cpu", "--stitch", "--align", "weight"]  # fmt: skip
    assert main([*base, "--json", "--out", str(tmp_path / "j")]) == 0
    summary = json.loads(capsys.readouterr().out)
    errors = summary["stitch_errors"]
    assert len(errors) == 5  # depth 3: three hidden layers and the logits, l = 0..4
    # l = 0 is B alone and l = L is A alone: the endpoints' errors on the same split
    assert errors[0] == pytest.approx(1 - summary["accuracy"][-1], abs=1e-9)
    assert errors[-1] == pytest.approx(1 - summary["accuracy"][0], abs=1e-9)
    assert main([*base, "--out", str(tmp_path / "t")]) == 0
    assert "stitched error, l = 0 (B) .. 4 (A):" in capsys.readouterr().out
