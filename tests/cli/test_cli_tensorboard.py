"""`lmc train --log tensorboard` and `lmc sweep --log tensorboard`: events read back."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from lmc.cli.main import main
from lmc.train.tblog import EPOCH_TAGS

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)

TRAIN = ["train", "--width", "8", "--depth", "1", "--epochs", "2", "--quiet", "--json"]


def _scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(log_dir))
    events.Reload()
    return {
        tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
    }


def _event_files(root: Path) -> list[Path]:
    return sorted(root.rglob("events.out.tfevents.*"))


def _train(argv: list[str], capsys) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_train_log_tensorboard_writes_each_epoch_under_the_run_name(tmp_path, capsys):
    runs = tmp_path / "runs"
    out = _train(TRAIN + ["--runs-dir", str(runs), "--log", "tensorboard"], capsys)
    run_dir = Path(out["run_dir"])
    log_dir = runs / "tb" / run_dir.name  # the default: RUNS_DIR/tb/<run folder name>
    scalars = _scalars(log_dir)
    assert set(scalars) == set(EPOCH_TAGS.values())
    history = json.loads((run_dir / "metrics.json").read_text())["history"]
    assert [h["epoch"] for h in history] == [1, 2]
    for key, tag in EPOCH_TAGS.items():
        expected = [(h["epoch"], float(np.float32(h[key]))) for h in history]
        assert scalars[tag] == expected, tag

    # logging is not part of the run's identity: the same config and folder without it
    plain = _train(TRAIN + ["--runs-dir", str(runs)], capsys)
    assert plain["reused"] and plain["run_dir"] == out["run_dir"]
    assert plain["config"] == out["config"]

    # a run reused from the store writes no events
    before = _event_files(runs / "tb")
    again = _train(TRAIN + ["--runs-dir", str(runs), "--log", "tensorboard"], capsys)
    assert again["reused"] and _event_files(runs / "tb") == before


def test_train_log_dir_option(tmp_path, capsys):
    log_dir = tmp_path / "elsewhere"
    argv = TRAIN + ["--runs-dir", str(tmp_path / "runs"), "--log", "tensorboard"]
    out = _train(argv + ["--log-dir", str(log_dir), "--seed", "1"], capsys)
    name = Path(out["run_dir"]).name
    assert [p.name for p in log_dir.iterdir()] == [name]
    assert _scalars(log_dir / name)["train/loss"][-1][0] == 2
    assert not (tmp_path / "runs" / "tb").exists()


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_train_without_tensorboard_is_one_line_and_creates_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    runs = tmp_path / "runs"
    assert main(TRAIN + ["--runs-dir", str(runs), "--log", "tensorboard"]) == 2
    err = _one_line_error(capsys)
    assert err.startswith("lmc train: error:") and "pip install 'lmc[tensorboard]'" in err
    assert not runs.exists()
    # without --log, training needs no tensorboard
    assert not _train(TRAIN + ["--runs-dir", str(runs)], capsys)["reused"]


def test_train_bad_log_options_are_one_line(tmp_path, capsys):
    runs = tmp_path / "runs"
    (tmp_path / "file").write_text("x")
    argv = TRAIN + ["--runs-dir", str(runs), "--log", "tensorboard"]
    assert main(argv + ["--log-dir", str(tmp_path / "file" / "tb")]) == 2
    assert "is a file, not a folder" in _one_line_error(capsys)
    assert main(TRAIN + ["--runs-dir", str(runs), "--log-dir", str(tmp_path / "tb")]) == 2
    assert "--log-dir needs --log tensorboard" in _one_line_error(capsys)
    assert main(TRAIN + ["--log", "wandb"]) == 2
    assert "--log" in _one_line_error(capsys)
    assert not runs.exists()


@pytest.fixture
def study(tmp_path, tiny_study, study_toml):
    """The tiny study's file, two epochs per model."""
    path = tmp_path / "study.toml"
    path.write_text(study_toml(tiny_study("tb-tiny", train={"epochs": 2})))
    return path


def test_sweep_log_tensorboard_writes_one_folder_per_trained_model(tmp_path, capsys, study):
    out, runs = tmp_path / "out", tmp_path / "runs"
    argv = ["sweep", str(study), "--out", str(out), "--runs-dir", str(runs), "--workers", "1"]
    argv += ["--quiet", "--device", "cpu", "--no-report", "--log", "tensorboard"]
    assert main(argv) == 0
    capsys.readouterr()
    trained = sorted(p.name for p in runs.iterdir() if (p / "metrics.json").exists())
    assert len(trained) == 2
    assert sorted(p.name for p in (out / "tb").iterdir()) == trained
    for name in trained:
        history = json.loads((runs / name / "metrics.json").read_text())["history"]
        scalars = _scalars(out / "tb" / name)
        assert set(scalars) == set(EPOCH_TAGS.values())
        expected = [(h["epoch"], float(np.float32(h["test_accuracy"]))) for h in history]
        assert scalars["test/accuracy"] == expected

    # a re-run reuses every run: no new events (a new OUT, so the merge runs again)
    before = _event_files(out / "tb")
    argv[argv.index(str(out))] = str(tmp_path / "out2")
    assert main(argv) == 0
    assert _event_files(out / "tb") == before and not (tmp_path / "out2" / "tb").exists()


def test_sweep_without_tensorboard_is_one_line(tmp_path, capsys, monkeypatch, study):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    out = tmp_path / "out"
    argv = ["sweep", str(study), "--out", str(out), "--runs-dir", str(tmp_path / "runs")]
    assert main(argv + ["--quiet", "--log", "tensorboard"]) == 2
    err = _one_line_error(capsys)
    assert err.startswith("lmc sweep: error:") and "tensorboard" in err
    assert not out.exists() and not (tmp_path / "runs").exists()
