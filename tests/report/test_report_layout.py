"""The report's layout: SVG beside every PNG at print resolution, click-to-enlarge links, a
Table 1 that scrolls and wraps, markers on cells resting on fewer pairs than asked, and
figures whose titles and tick labels do not collide."""

from __future__ import annotations

import csv
import json
import re
import struct
from html.parser import HTMLParser
from itertools import combinations
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from lmc.metrics.figures import DPI, SCREEN_DPI
from lmc.report import build as report_build
from lmc.report import figures as report_figures
from lmc.report import load_results, log_scale, write_report
from lmc.report.build import SHORT_MARK


class _Figures(HTMLParser):
    """Per <figure>: the link around its image and the image's width."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: list[dict] = []
        self._link: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "a" and attrs.get("class") == "full":
            self._link = attrs["href"]
        if tag == "img":
            self.figures.append({"href": self._link, "width": attrs.get("width")})

    def handle_endtag(self, tag):
        if tag == "a":
            self._link = None


def _png_width(data: bytes) -> int:
    return struct.unpack(">II", data[16:24])[0]


def _svg_width_inches(data: bytes) -> float:
    match = re.search(rb'<svg[^>]*\swidth="([\d.]+)pt"', data)
    assert match, "no width in pt on the <svg> element"
    return float(match.group(1)) / 72.0


def test_every_figure_has_an_svg_beside_a_print_resolution_png(rendered):
    assert DPI >= 200
    for name in rendered["figures"]:
        png, svg = Path(name), Path(name).with_suffix(".svg")
        assert svg.is_file(), svg
        data = svg.read_bytes()
        assert data.lstrip().startswith(b"<?xml") and b"<svg" in data
        dpi = _png_width(png.read_bytes()) / _svg_width_inches(data)
        assert dpi == pytest.approx(DPI, rel=0.01), (png.name, dpi)


def test_html_links_each_figure_to_its_full_size_file(rendered):
    out = Path(rendered["report_html"]).parent
    parser = _Figures()
    parser.feed(Path(rendered["report_html"]).read_text())
    assert len(parser.figures) == len(rendered["figures"]) == 15
    for fig, png in zip(parser.figures, rendered["figures"]):
        assert fig["href"] == f"figures/{Path(png).stem}.svg"
        assert (out / fig["href"]).is_file()
        inches = _svg_width_inches((out / fig["href"]).read_bytes())
        assert int(fig["width"]) == round(inches * SCREEN_DPI)  # shown at screen size
    md = Path(rendered["report_md"]).read_text()
    first = Path(rendered["figures"][0])
    assert f"](figures/{first.name})](figures/{first.stem}.svg)" in md


def test_page_and_table_css_fit_wide_screens_and_phones(rendered):
    html = Path(rendered["report_html"]).read_text()
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in html
    css = html[html.index("<style>") : html.index("</style>")]
    assert re.search(r"figure img \{[^}]*max-width: 100%", css)
    assert re.search(r"\.table-wrap \{[^}]*overflow-x: auto", css)
    assert re.search(r"\bth \{[^}]*white-space: normal", css)  # headers wrap
    assert "@media (max-width:" in css
    assert html.count('<div class="table-wrap wide"><table><caption>digits') == 2  # Table 1


def _rewrite_results(path: Path, keep, change=lambda row: row) -> None:
    with open(path / "results.csv", newline="") as handle:
        reader = csv.DictReader(handle)
        columns = list(reader.fieldnames) + ["calibration_at_bound"]
        rows = [change(dict(r)) for r in reader if keep(r)]
    with open(path / "results.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for r in rows:
            writer.writerow({c: r.get(c, "") for c in columns})


def _table1_rows(html: str) -> list[list[str]]:
    class Rows(HTMLParser):
        def __init__(self):
            super().__init__()
            self.rows, self.cell = [], None

        def handle_starttag(self, tag, attrs):
            if tag == "tr":
                self.rows.append([])
            if tag == "td":
                self.cell = ""

        def handle_endtag(self, tag):
            if tag == "td":
                self.rows[-1].append(self.cell)
                self.cell = None

        def handle_data(self, data):
            if self.cell is not None:
                self.cell += data

    parser = Rows()
    parser.feed(html)
    return [r for r in parser.rows if r]


@pytest.fixture(scope="module")
def short_report(tmp_path_factory, writers):
    """3 pairs asked; width 64 / no permutation / wd 3e-3 lost pair 2; width 256 / weight
    matching / wd 3e-3 has an undefined calibration at λ = ½ for pair 0."""
    path = tmp_path_factory.mktemp("short") / "study"
    writers.make_results(path, widths=(16, 64, 256), weight_decays=(3e-3,), pairs=3)

    def lost(r):
        return (r["width"], r["method"], r["pair"]) == ("64", "none", "2")

    def undefined(r):
        if (r["width"], r["method"], r["pair"], r["lam"]) == ("256", "weight", "0", "0.5"):
            r["calibration_at_bound"] = "1"
        return r

    _rewrite_results(path, lambda r: not lost(r), undefined)
    out = tmp_path_factory.mktemp("short_report")
    paths = write_report(path, out_dir=out)
    return path, paths


def test_cells_resting_on_fewer_pairs_than_asked_are_marked(short_report):
    path, paths = short_report
    assert json.loads((path / "study.json").read_text())["config"]["sweep"]["pairs"] == 3
    html = Path(paths["report_html"]).read_text()
    header_at = html.index("<thead>", html.index("Table 1: barriers"))
    head = re.findall(r"<th[^>]*>(.*?)</th>", html[header_at : html.index("</thead>", header_at)])
    rows = {(r[0], r[1]): dict(zip(head, r)) for r in _table1_rows(html) if len(r) == len(head)}
    short = rows[("64", "no permutation")]
    assert short["pairs"] == f"2{SHORT_MARK}"
    for header in head[2:-1]:  # every value of that row rests on 2 pairs (not the count)
        assert short[header].endswith(SHORT_MARK), header
    assert head[-1] == "pairs with undefined calibration"
    undefined = rows[("256", "weight matching")]
    assert undefined["pairs"] == "3" and undefined[head[-1]] == "1"
    for header in ("calibrated loss barrier (nats)", "β merged", "β ensemble"):
        assert undefined[header].endswith(SHORT_MARK), header
    for header in ("merged acc. (%)", "loss barrier (nats)"):
        assert not undefined[header].endswith(SHORT_MARK), header
    full = rows[("16", "no permutation")]
    assert not any(v.endswith(SHORT_MARK) for v in full.values())
    assert html.count('<p class="footnote">') == 1
    assert f"{SHORT_MARK} rests on fewer pairs than the study's 3" in html
    md = Path(paths["report_md"]).read_text()
    assert f"| 2{SHORT_MARK} |" in md and f"{SHORT_MARK} rests on fewer pairs" in md


def test_no_marker_when_every_cell_has_all_pairs(rendered):
    html = Path(rendered["report_html"]).read_text()
    assert SHORT_MARK not in html and 'class="footnote"' not in html


def _overlaps(boxes) -> list:
    return [(a, b) for (a, ba), (b, bb) in combinations(boxes, 2) if ba.overlaps(bb)]


@pytest.fixture(scope="module")
def drawn(synthetic):
    """Title and tick label boxes of the barriers, moments and spectra figures, measured on
    the drawn figure just before the report encodes (and clears) it."""
    res = load_results(synthetic.path)
    measured = []
    original = report_figures.render

    def measure(fig):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        texts = [fig._suptitle] + [ax.title for ax in fig.axes]
        titles = [
            (t.get_text(), t.get_window_extent(renderer)) for t in texts if t and t.get_text()
        ]
        ticks = []
        for ax in fig.axes:
            for axis, index in ((ax.xaxis, 0), (ax.yaxis, 1)):
                lo, hi = sorted(axis.get_view_interval())
                shown = [
                    t
                    for t in axis.get_ticklabels()
                    if t.get_visible() and t.get_text() and lo <= t.get_position()[index] <= hi
                ]
                ticks.append([(t.get_text(), t.get_window_extent(renderer)) for t in shown])
        measured.append((titles, ticks))
        return original(fig)

    report_figures.render = measure
    out = {}
    try:
        for name, fn in (
            ("barriers", report_figures.barriers_vs_width),
            ("moments", report_figures.second_moments),
            ("spectra", report_figures.spectra),
        ):
            assert isinstance(fn(res, 3e-3), report_figures.Plot)
            out[name] = measured[-1]
    finally:
        report_figures.render = original
    return out


@pytest.mark.parametrize("name", ["barriers", "moments", "spectra"])
def test_titles_and_tick_labels_do_not_collide(drawn, name):
    titles, ticks = drawn[name]
    assert len(titles) >= 2
    assert not _overlaps(titles), name
    for labels in ticks:
        assert len(labels) <= 8, [t for t, _ in labels]
        assert not _overlaps(labels), [t for t, _ in labels]


def _axes():
    fig = Figure()
    FigureCanvasAgg(fig)
    return fig.add_subplot()


def test_log_scale_ticks_wide_and_narrow_ranges():
    ax = _axes()
    ax.plot([0, 1], [2e-5, 1.0])
    log_scale(ax, "y")
    ticks = ax.yaxis.get_major_locator()()
    assert len(ticks) <= 6 and all(abs(t - 10 ** round(__import__("math").log10(t))) < 1e-12 * t
                                   for t in ticks)  # fmt: skip
    assert min(ticks) <= 2e-5 * 10 and max(ticks) >= 0.1
    ax = _axes()
    ax.plot([3.4, 6.5], [0, 1])
    log_scale(ax, "x")
    ticks = list(ax.xaxis.get_major_locator()())
    assert 3 <= len(ticks) <= 6 and all(3.4 <= t <= 6.5 for t in ticks)


def test_table1_block_marks_only_with_a_study_size():
    row = {"width": 8, "method": "none", "pairs": 1, "merged_accuracy_mean": 0.5}
    row["merged_accuracy_std"] = float("nan")
    table = report_build.table1_block([row], "c")
    assert SHORT_MARK not in "".join(table.rows[0]) and not table.footnote
    table = report_build.table1_block([row], "c", asked=2)
    assert table.rows[0][2] == f"1{SHORT_MARK}" and table.footnote
