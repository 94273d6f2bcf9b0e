"""The README is what a newcomer needs first (issue 45 item 9): at most 300 lines, the two
quick-start commands as they are, and a pointer to every page of the documentation site, whose
pages hold the rest."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_LINES = 300
QUICK_START = [
    "bash scripts/demo.sh     # the main job: `lmc demo` on the offline digits dataset -> "
    "lmc-demo/report.html",
    "bash scripts/test.sh     # the tests: lint + pytest",
]


def _nav_pages() -> list[str]:
    """The Markdown files mkdocs.yml's nav names (``- Title: page.md`` or ``- page.md``)."""
    text = (ROOT / "mkdocs.yml").read_text()
    nav = text[text.index("\nnav:") :]
    return re.findall(r"^\s*- (?:[^:\n]+: )?([\w/.-]+\.md)\s*$", nav, flags=re.M)


def _links(text: str) -> set[str]:
    return {target.split("#")[0] for target in re.findall(r"\]\(([^)\s]+)\)", text)}


def test_readme_is_at_most_300_lines():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines: move some to docs/"


def test_the_quick_start_is_the_two_commands():
    text = README.read_text()
    block = re.search(r"## Quick start\n.*?```bash\n(.*?)\n```", text, re.S)
    assert block and block.group(1).splitlines() == QUICK_START


def test_the_readme_points_to_every_page_of_the_site():
    pages = [page for page in _nav_pages() if "/" not in page or page == "api/index.md"]
    linked = _links(README.read_text())
    missing = [page for page in pages if page != "index.md" and f"docs/{page}" not in linked]
    assert pages and not missing, f"README.md does not link to {missing}"
    assert "docs/results/" in linked  # the results pages, listed by the site itself
    assert "mkdocs build --strict" in README.read_text()
