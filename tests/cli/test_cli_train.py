import json

import pytest

from lmc.cli.main import main


def test_train_json_and_reuse(tmp_path, capsys):
    argv = [
        "train",
        "--dataset",
        "digits",
        "--width",
        "16",
        "--epochs",
        "2",
        "--quiet",
        "--runs-dir",
        str(tmp_path),
        "--json",
    ]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("run_dir", "config", "final_test_accuracy", "final_test_loss"):
        assert key in out
    assert 0.0 <= out["final_test_accuracy"] <= 1.0
    assert out["config"]["model_options"]["width"] == 16 and not out["reused"]
    assert main(argv[:-1]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "reusing" in lines[0] and lines[-1] == out["run_dir"]


def test_seed_flags(tmp_path, capsys):
    base = [
        "train",
        "--width",
        "8",
        "--epochs",
        "1",
        "--quiet",
        "--runs-dir",
        str(tmp_path),
        "--json",
        "--seed",
        "3",
    ]
    main(base + ["--data-seed", "5"])
    config = json.loads(capsys.readouterr().out)["config"]["train"]
    assert (config["init_seed"], config["data_seed"]) == (3, 5)


def test_missing_dataset_is_one_line_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("LMC_DATA", str(tmp_path / "data"))
    code = main(["train", "--dataset", "mnist", "--runs-dir", str(tmp_path), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "mnist" in err and "--download" in err and str(tmp_path / "data") in err


def test_spawn_needs_epoch(tmp_path, capsys):
    code = main(["train", "--spawn-from", str(tmp_path), "--quiet", "--runs-dir", str(tmp_path)])
    assert code == 2 and "--spawn-epoch" in capsys.readouterr().err


def test_corrupt_spawn_parent(tmp_path, capsys):
    code = main(
        ["train", "--spawn-from", str(tmp_path / "missing"), "--spawn-epoch", "1", "--quiet"]
    )
    assert code == 2 and "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags, fragment",
    [
        (["--width", "0"], "width must be positive"),
        (["--width", "nan"], "width must be positive and finite"),
        (["--width", "-5"], "width must be positive"),
        (["--width", "inf"], "width must be positive and finite"),
        (["--width", "100000000"], "more than this machine's"),
        (["--lr", "nan"], "lr must be finite"),
        (["--lr", "inf"], "lr must be finite"),
        (["--momentum", "-1"], "momentum must be at least 0"),
        (["--label-smoothing", "2"], "label_smoothing must be below 1"),
        (["--warmup-epochs", "-5"], "warmup_epochs must be at least 0"),
        (["--weight-decay", "nan"], "weight_decay must be finite"),
        (["--depth", "-1"], "depth must be at least 1"),
    ],
)
def test_a_bad_setting_is_one_line_and_creates_nothing(tmp_path, capsys, flags, fragment):
    runs = tmp_path / "runs"
    argv = ["train", "--dataset", "digits", "--epochs", "1", "--quiet", "--runs-dir", str(runs)]
    assert main([*argv, *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and fragment in err, err
    assert not runs.exists()
