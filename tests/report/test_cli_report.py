"""``lmc report``: path on the last stdout line, --json, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

from lmc.cli.main import main


def test_cli_writes_report_and_prints_html_path_last(tmp_path, capsys, make_synthetic):
    synthetic = make_synthetic(
        tmp_path / "res", widths=(8,), weight_decays=(3e-3,), pairs=1, lams=3, extras=False
    )
    assert main(["report", str(synthetic.path), "--title", "My study"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    html_path = synthetic.path / "report.html"
    assert lines[-1] == str(html_path) and html_path.exists()
    assert "<title>My study</title>" in html_path.read_text()


def test_cli_json(tmp_path, capsys, make_synthetic):
    synthetic = make_synthetic(
        tmp_path / "res", widths=(8,), weight_decays=(3e-3,), pairs=1, lams=3, extras=False
    )
    out_dir = tmp_path / "elsewhere"
    assert main(["report", str(synthetic.path), "--out", str(out_dir), "--json"]) == 0
    captured = capsys.readouterr()
    payload = json.loads(captured.out)  # exactly one JSON object on stdout
    assert set(payload) == {"report_md", "report_html", "figures"}
    assert payload["report_html"] == str(out_dir / "report.html")
    assert all(
        Path(f).is_file() and Path(f).parent == out_dir / "figures" for f in payload["figures"]
    )
    assert not (synthetic.path / "report.html").exists()


def test_cli_missing_results_is_one_line_error(tmp_path, capsys):
    folder = tmp_path / "nothing-here"
    folder.mkdir()
    assert main(["report", str(folder)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert str(folder) in err and "lmc sweep" in err
    assert captured.out == ""
