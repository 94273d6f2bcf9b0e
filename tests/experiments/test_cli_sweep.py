import json

import pytest

from lmc.cli.main import main


@pytest.fixture
def study(tiny_study):
    """The tiny study at widths 8 and 32, two epochs, layerwise analysis on 64 examples."""
    return tiny_study(
        "cli-tiny",
        sweep={"widths": [8, 32]},
        train={"epochs": 2},
        merge={"calibrate": None},
        analysis={"enabled": None, "max_examples": 64},
    )


def test_sweep_cli_writes_results_and_report(tmp_path, capsys, study, study_toml):
    raw, study = study, tmp_path / "study.toml"
    study.write_text(study_toml(raw))
    out = tmp_path / "out"
    argv = [
        "sweep",
        str(study),
        "--out",
        str(out),
        "--runs-dir",
        str(tmp_path / "runs"),
        "--workers",
        "1",
        "--quiet",
        "--device",
        "cpu",
    ]
    assert main(argv + ["--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["status"] == "finished" and record["jobs"]["run"] == 6
    for name in (
        "results.csv",
        "layers.csv",
        "table1.csv",
        "study.json",
        "study.toml",
        "report.html",
        "report.md",
    ):
        assert (out / name).exists(), name
    assert main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "6 reused" in lines[0] and lines[-1].endswith("report.html")


def test_sweep_cli_unknown_key_is_one_line(tmp_path, capsys, study, study_toml):
    raw, study = study, tmp_path / "bad.toml"
    study.write_text(study_toml({**raw, "sweep": {**raw["sweep"], "widht": 3}}))
    assert main(["sweep", str(study), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "sweep.widht" in err
