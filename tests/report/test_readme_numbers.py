"""Every number on the results pages and in the generated blocks of the README and the site's
pages (docs/findings.md, docs/performance.md, ...) comes from a committed file: regenerating them
(scripts/results_pages.py) gives exactly the committed text, so a changed digit fails; and every
speed or memory figure on the Performance page (docs/performance.md) cites a committed log under
docs/results/benchmarks/."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import pytest
from scipy import stats

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
FINDINGS = "docs/findings.md"
PERFORMANCE = "docs/performance.md"
# a timing, memory or speed figure: a number with its unit, or a ratio such as 4.3×
FIGURE = re.compile(r"\d\s*(s\b|ms\b|min\b|MiB|GiB|GFLOP|×|x faster)")
LOG = re.compile(r"docs/results/benchmarks/[\w.*-]+")


@pytest.fixture(scope="module")
def pages(load_script):
    return load_script("results_pages")


def _copy(tmp_path: Path) -> Path:
    """The README and docs/ (sources, pages, committed results) in a fresh root."""
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", root / "docs")
    shutil.copy(ROOT / "README.md", root / "README.md")
    return root


def test_every_study_folder_has_a_page_source(pages):
    studies = {p.name for p in RESULTS.iterdir() if p.is_dir() and p.name != "benchmarks"}
    assert studies == {p.name for p in pages.study_folders(ROOT)}


def test_committed_pages_and_generated_blocks_are_what_the_files_give(pages):
    assert pages.stale(ROOT) == [], "run: python scripts/results_pages.py"
    assert "<!-- BEGIN generated: findings -->" in (ROOT / FINDINGS).read_text()
    assert "<!-- BEGIN generated: demo -->" in (ROOT / "README.md").read_text()


def test_an_edited_number_fails_the_check(pages, tmp_path):
    root = _copy(tmp_path)
    page = root / "docs/results/lewc-fmnist-mlp-wide/README.md"
    text = page.read_text()
    number = re.search(r"\d+\.\d{3} ± \d+\.\d{3}", text).group(0)
    digit = number[-1]
    page.write_text(text.replace(number, number[:-1] + str((int(digit) + 1) % 10), 1))
    findings = root / FINDINGS
    block = re.search(r"BEGIN generated: findings -->\n(.*?)<!-- END", findings.read_text(), re.S)
    cell = re.search(r"\d+\.\d ", block.group(1)).group(0)
    findings.write_text(findings.read_text().replace(cell, cell.replace(".", "", 1), 1))
    readme = root / "README.md"
    text = readme.read_text()
    demo = re.search(r"BEGIN generated: demo -->\n(.*?)<!-- END", text, re.S).group(1)
    number = re.search(r"\d+\.\d{3} ± ", demo).group(0)  # the demo block's first estimate
    edited = number[:4] + str((int(number[4]) + 1) % 10) + number[5:]
    readme.write_text(text.replace(number, edited, 1))
    assert sorted(pages.stale(root)) == sorted([page, findings, readme])


def test_a_block_in_a_site_page_reads_from_the_root_and_links_from_its_page(pages, tmp_path):
    """A block's source is written from the repository root (its placeholders and links); in a
    page under docs/ its links are rewritten from the page's folder, and a link that names no
    file there is an error."""
    root = tmp_path / "repo"
    (root / "docs" / "results" / "s").mkdir(parents=True)
    (root / "docs" / "results" / "s" / "README.md").write_text("# s\n")
    (root / "docs" / "results" / "s" / "t.csv").write_text("w,x\n1,0.25\n")
    source = root / "docs" / "results" / "readme-b.md.in"
    source.write_text(
        "x is {{docs/results/s/t.csv: w=1 | x | .2f}} ([s](docs/results/s/README.md#top), "
        "[site](https://example.org))"
    )
    empty = "<!-- BEGIN generated: b -->\n<!-- END generated: b -->\n"
    rendered = pages.render_blocks(empty, root, "docs/page.md")
    assert "x is 0.25 ([s](results/s/README.md#top), [site](https://example.org))" in rendered
    assert "(docs/results/s/README.md#top)" in pages.render_blocks(empty, root, "README.md")
    source.write_text("[gone](docs/results/nothing.md)")
    with pytest.raises(pages.PageError, match="names no file"):
        pages.render_blocks(empty, root, "docs/page.md")


def test_every_block_source_has_its_block_in_exactly_one_file(pages, tmp_path):
    root = _copy(tmp_path)
    findings = root / FINDINGS
    text = findings.read_text()
    block = re.search(r"<!-- BEGIN generated: findings -->.*?<!-- END generated: findings -->\n",
                      text, re.S).group(0)  # fmt: skip
    findings.write_text(text.replace(block, ""))
    with pytest.raises(pages.PageError, match="readme-findings.md.in: .* in 0 of"):
        pages.stale(root)
    findings.write_text(text + "\n" + block)  # twice in one file
    with pytest.raises(pages.PageError, match="readme-findings.md.in: .* in 2 of"):
        pages.stale(root)


def test_a_changed_committed_value_makes_its_page_stale(pages, tmp_path):
    root = _copy(tmp_path)
    table = root / "docs/results/lewc-fmnist-vgg11/table1.csv"
    lines = table.read_text().split("\n")
    cells = lines[1].split(",")
    cells[4] = str(float(cells[4]) + 0.01)  # endpoint_accuracy_mean of the first row
    table.write_text("\n".join([lines[0], ",".join(cells), *lines[2:]]))
    assert root / "docs/results/lewc-fmnist-vgg11/README.md" in pages.stale(root)
    # a summary value a verdict reads must agree with the per-pair results.csv beside it
    cells[6] = str(float(cells[6]) + 0.01)  # merged_accuracy_mean
    table.write_text("\n".join([lines[0], ",".join(cells), *lines[2:]]))
    with pytest.raises(pages.PageError, match=r"gives \d+ values of accuracy"):
        pages.stale(root)


def test_intervals_verdicts_and_formats(pages, tmp_path):
    (tmp_path / "pairs.csv").write_text("w,pair,x\n1,0,0.5\n1,1,0.7\n1,2,0.9\n2,0,0.1\n")
    (tmp_path / "t.csv").write_text(
        "w,pairs,x_mean,x_std,undefined_calibration_pairs,calibrated_x_mean,calibrated_x_std\n"
        "1,3,0.7,0.2,0,0.3,0.1\n2,2,0.1,0.0,1,0.2,nan\n"
    )
    ctx = pages.Context(base=tmp_path, root=tmp_path, source="test")

    def render(body: str) -> str:
        return pages.render_placeholder(ctx, body)

    half = stats.t.ppf(0.975, 2) * 0.2 / math.sqrt(3)
    assert render("pairs.csv: w=1 | x | ci .3f") == f"0.700 ± {half:.3f}"
    assert render("t.csv: w=1 | x | ci .3f") == f"0.700 ± {half:.3f}"  # the summary row
    assert render("t.csv: w=2 | calibrated_x | ci .2f") == "0.20 (n = 1)"
    assert render("t.csv: w=2 | calibrated_x | n") == "1"
    assert render("pairs.csv: w=1 | x | range %.0f") == "50–90"
    assert render("pairs.csv: w=2 | x | .2f") == "0.10"
    assert render("= [pairs.csv: w=2 | x] - [pairs.csv: w=1 | x | max] | .1f") == "−0.8"
    # a verdict is lmc.stats': never "within noise" from overlapping intervals
    assert render("? [pairs.csv: w=2 | x] vs [pairs.csv: w=1 | x]") == (
        "too few pairs (n = 1 < 3): no verdict"
    )
    with pytest.raises(pages.PageError, match="per-pair values"):
        render("? [pairs.csv: w=1 | x | ci] vs [t.csv: w=1 | x | ci]")  # 3 pairs, summary only
    assert render("pairs.csv: w>=1, pair!=0 | 1 - x | list .1f") == "0.3, 0.1"
    with pytest.raises(pages.PageError, match="rows"):
        render("pairs.csv: w=1 | x | .2f")  # three rows and no aggregation
    with pytest.raises(pages.PageError, match="no row"):
        render("pairs.csv: w=3 | x | mean")


def test_loops_fill_one_line_per_group(pages, tmp_path):
    (tmp_path / "a.csv").write_text("w,m,x\n2,none,0.25\n1,none,0.5\n1,weight,0.75\n")
    ctx = pages.Context(base=tmp_path, root=tmp_path, source="test")
    text = "{{#each a.csv: m=none | by=w | sort=w}}\n| {{w}} | {{: | x | .2f}} |\n{{/each}}"
    assert pages.render_text(ctx, text, {}) == "| 1 | 0.50 |\n| 2 | 0.25 |"


def _performance_items(page: str) -> list[str]:
    """The top-level list items of the page's "# Performance" section (up to a next heading)."""
    start = page.index("# Performance")
    end = page.find("\n#", start + 1)
    return re.split(r"\n(?=- )", page[start : end if end != -1 else len(page)])[1:]


def test_every_speed_and_memory_figure_cites_a_committed_log():
    items = _performance_items((ROOT / PERFORMANCE).read_text())
    assert len(items) >= 4
    for item in items:
        cited = LOG.findall(item)
        for path in cited:
            assert list(ROOT.glob(path)), f"{path} is not a committed file"
        if FIGURE.search(item):
            assert cited, f"a figure without a committed log: {item[:80]}"


def test_the_figure_check_catches_an_uncited_figure():
    page = "# Performance\n\nIntro.\n\n- **Speed**: 12.5 s on a laptop.\n\n## Next\n\n- 3 s\n"
    (item,) = _performance_items(page)
    assert FIGURE.search(item) and not LOG.findall(item)
