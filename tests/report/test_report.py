"""The report renders from a realistic synthetic results folder: files, embedded PNGs, Table 1
numbers, config, contents; and degenerate folders still render with notes."""

from __future__ import annotations

import base64
import json
import math
import struct
from pathlib import Path

import numpy as np
import pytest

from lmc.config import LmcError
from lmc.report import table1, write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from the IHDR chunk (the first chunk, right after the signature)."""
    assert data[:8] == PNG_SIGNATURE
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    return struct.unpack(">II", data[16:24])


def test_files_and_embedded_figures(rendered, parse_html):
    html_path, md_path = Path(rendered["report_html"]), Path(rendered["report_md"])
    assert html_path.exists() and md_path.exists()
    doc = parse_html(rendered["report_html"])
    assert len(doc.images) == len(rendered["figures"]) == 15
    for src, file in zip(doc.images, rendered["figures"]):
        assert src.startswith("data:image/png;base64,")
        data = base64.b64decode(src.split(",", 1)[1], validate=True)
        width, height = png_size(data)
        assert 300 <= width <= 3000 and 200 <= height <= 3000, (file, width, height)
        assert data == Path(file).read_bytes()  # the embedded image is the written figure
    assert not doc.external  # self-contained: no scripts, stylesheets or remote links


def test_figure_set_and_markdown_references(rendered):
    names = sorted(Path(f).stem for f in rendered["figures"])
    expected = ["weight_decay_ablation"] + [
        f"{stem}_wd{wd}"
        for stem in (
            "accuracy_vs_width",
            "barriers_vs_width",
            "interpolation",
            "inverse_temperature",
            "layer_cosines",
            "moments",
            "spectra",
        )
        for wd in ("0.003", "0.0001")
    ]
    assert names == sorted(expected)
    md = Path(rendered["report_md"]).read_text()
    out = Path(rendered["report_md"]).parent
    for f in rendered["figures"]:
        rel = Path(f).relative_to(out).as_posix()
        assert f"]({rel})" in md
    assert md.count("*Figure ") == 15


def test_contents_links_resolve(rendered, parse_html):
    doc = parse_html(rendered["report_html"])
    assert doc.links, "no table of contents"
    assert set(doc.links) <= set(doc.ids)
    for section in ("summary", "reproducibility", "weight-decay-ablation"):
        assert section in doc.links


def _recompute(rows, *, width, wd, method, column):
    """Per pair: (value(½) − ½(value(0) + value(1))), straight from the fixture's rows; the
    mean and sample std over pairs."""
    per_pair = []
    for pair in sorted({r["pair"] for r in rows}):
        path = {
            r["lam"]: r[column]
            for r in rows
            if r["width"] == width
            and r["weight_decay"] == wd
            and r["method"] == method
            and r["pair"] == pair
        }
        per_pair.append(path[0.5] - 0.5 * (path[0.0] + path[1.0]))
    values = np.array(per_pair)
    return values.mean(), values.std(ddof=1)


def _ci95(std, n=2):
    """Half-width of the 95 % t-interval of a mean of n values (the fixture has 2 pairs)."""
    from scipy import stats

    return stats.t.ppf(0.975, n - 1) * std / math.sqrt(n)


def test_table1_numbers_in_html(synthetic, rendered, parse_html):
    doc = parse_html(rendered["report_html"])
    # accuracy barrier (pp, sign reversed) for width 64, weight decay 3e-3, no permutation
    mean, std = _recompute(synthetic.rows, width=64, wd=3e-3, method="none", column="accuracy")
    text = f"{-100 * mean:.3f} ± {100 * _ci95(std):.3f}"
    assert text in doc.cells
    # calibrated loss barrier (nats) for width 256, weight decay 1e-4, weight matching
    mean, std = _recompute(
        synthetic.rows, width=256, wd=1e-4, method="weight", column="calibrated_loss"
    )
    assert f"{mean:.3f} ± {_ci95(std):.3f}" in doc.cells
    # every formatted mean ± 95 % interval of table1() appears in the HTML table cells
    for row in table1(synthetic.rows):
        cell = (
            f"{100 * row['midpoint_accuracy_barrier_mean']:.3f} ± "
            f"{100 * row['midpoint_accuracy_barrier_ci95']:.3f}"
        )
        assert cell in doc.cells
        assert f"{row['midpoint_loss_barrier_mean']:.3f} ± " in " ".join(doc.cells)


def test_table1_agrees_with_independent_recomputation(synthetic):
    rows = {(r["width"], r["weight_decay"], r["method"]): r for r in table1(synthetic.rows)}
    assert len(rows) == 3 * 2 * 2
    for (width, wd, method), row in rows.items():
        mean, std = _recompute(synthetic.rows, width=width, wd=wd, method=method, column="loss")
        assert row["midpoint_loss_barrier_mean"] == pytest.approx(mean, abs=1e-12)
        assert row["midpoint_loss_barrier_std"] == pytest.approx(std, abs=1e-12)
        assert row["pairs"] == 2


def test_config_versions_and_timing_appear(synthetic, rendered, parse_html):
    text = "".join(parse_html(rendered["report_html"]).text)
    assert json.dumps(synthetic.config, indent=2) in text  # the exact config, pretty JSON
    assert '"weight_decays": [\n      0.003,\n      0.0001\n    ]' in text
    assert "epochs = 7 # <seven> & done" in text  # the TOML, escaped in HTML, intact as text
    assert "12 min 34 s" in text and "48 total, 12 reused" in text
    assert "torch" in text and "2.13.0" in text
    md = Path(rendered["report_md"]).read_text()
    assert "```toml" in md and "```json" in md and "Synthetic width study" in md


def test_captions_name_what_to_look_for(rendered):
    md = Path(rendered["report_md"]).read_text()
    assert "monotonically with width" in md
    assert "0.930" in md  # Theorem 5.4's limit in the layerwise caption
    assert "2^(L−1) = 8 times" in md  # L = 4 from layers.csv


def test_degenerate_single_width_single_pair_no_calibration(tmp_path, make_synthetic, parse_html):
    synthetic = make_synthetic(
        tmp_path / "tiny",
        widths=(32,),
        weight_decays=(3e-3,),
        pairs=1,
        methods=("none",),
        lams=5,
        calibrate=False,
        extras=False,
    )
    assert sorted(p.name for p in synthetic.path.iterdir()) == ["results.csv"]
    paths = write_report(synthetic.path)
    assert Path(paths["report_html"]).parent == synthetic.path
    doc = parse_html(paths["report_html"])
    assert len(doc.images) == len(paths["figures"]) == 1  # only the interpolation curves
    text = "".join(doc.text)
    assert "skipped (only one width" in text
    assert "skipped (calibration was off" in text
    assert "skipped (no layers.csv" in text
    assert "Only one pair was run" in text
    assert "calibrated loss barrier" not in " ".join(doc.cells)
    row = table1(synthetic.rows)[0]
    assert row["merged_accuracy_std"] == 0.0 and row["pairs"] == 1
    assert math.isnan(row["calibrated_midpoint_loss_barrier_mean"])


def test_missing_results_csv_is_lmc_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(LmcError, match="no results.csv.*lmc sweep") as info:
        write_report(tmp_path / "empty")
    assert str(tmp_path / "empty") in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(LmcError, match="not a folder"):
        write_report(tmp_path / "missing")


def test_table1_csv_is_preferred_when_present(tmp_path, make_synthetic, parse_html):
    synthetic = make_synthetic(
        tmp_path / "t1", widths=(8, 16), weight_decays=(3e-3,), pairs=2, extras=False
    )
    computed = table1(synthetic.rows)
    columns = list(computed[0])
    lines = [",".join(columns)]
    for r in computed:
        r = dict(r)
        if r["width"] == 16 and r["method"] == "weight":
            r["midpoint_loss_barrier_mean"], r["midpoint_loss_barrier_ci95"] = 0.123456, 0.0789
        lines.append(",".join(str(r[c]) for c in columns))
    (synthetic.path / "table1.csv").write_text("\n".join(lines) + "\n")
    paths = write_report(synthetic.path, out_dir=tmp_path / "out")
    doc = parse_html(paths["report_html"])
    assert "0.123 ± 0.079" in doc.cells
    assert "Values from table1.csv." in "".join(doc.text)


def test_missing_layer_columns_and_corrupt_optional_files(tmp_path, make_synthetic, parse_html):
    """Columns absent from layers.csv become 'not recorded' panels; a corrupt moments.json and
    a spectra.json of the wrong shape are ignored with a note; nothing raises."""
    synthetic = make_synthetic(tmp_path / "res", widths=(8, 32), weight_decays=(1e-4,), pairs=2)
    layers = synthetic.path / "layers.csv"
    lines = layers.read_text().splitlines()
    header = lines[0].split(",")
    drop = {header.index(c) for c in ("weak_additivity_cosine", "reciprocal_cosine")}
    layers.write_text(
        "\n".join(",".join(c for i, c in enumerate(line.split(",")) if i not in drop)
                  for line in lines) + "\n"
    )  # fmt: skip
    (synthetic.path / "moments.json").write_text("[{not json")
    (synthetic.path / "spectra.json").write_text('{"a": 1}')
    paths = write_report(synthetic.path)
    names = {Path(f).stem for f in paths["figures"]}
    assert "layer_cosines_wd0.0001" in names and "moments_wd0.0001" not in names
    text = "".join(parse_html(paths["report_html"]).text)
    assert "moments.json could not be read" in text
    assert "spectra.json is not a list of records" in text
    assert "skipped (only one weight decay" in text
