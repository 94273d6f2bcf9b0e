"""docs/hooks.py on exact inputs: which links it rewrites and how, and the grouped parameters of
its griffe extension (the site build in test_site.py shows only that the real pages pass)."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")
griffe = pytest.importorskip("griffe", reason="the docs extra is not installed (mkdocstrings)")
markdown = pytest.importorskip("markdown")

HOOKS = Path(__file__).resolve().parents[2] / "docs" / "hooks.py"


@pytest.fixture
def hooks():
    spec = importlib.util.spec_from_file_location("lmc_docs_hooks", HOOKS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Files:
    """The part of mkdocs' ``Files`` the hook asks: a page by its path under docs/."""

    def __init__(self, pages: dict[str, bool]):  # path -> excluded
        self.pages = pages

    def get_file_from_path(self, path: str):
        if path not in self.pages:
            return None
        excluded = self.pages[path]
        return SimpleNamespace(inclusion=SimpleNamespace(is_excluded=lambda: excluded))


def _render(hooks, tmp_path: Path, page: str, text: str, pages: dict[str, bool]) -> str:
    hooks._state.update(docs_dir=tmp_path / "docs", root=tmp_path, page=page, files=_Files(pages))
    return markdown.markdown(text, extensions=[hooks._RepositoryLinks()])


def test_links_out_of_the_site_become_repository_paths(hooks, tmp_path):
    for path in ("README.md", "src/lmc/x.py", "docs/results/a/README.md", "docs/README.md"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x")
    (tmp_path / "docs" / "results" / "logs").mkdir()
    pages = {"results/a/README.md": False, "index.md": False, "README.md": True}
    html = _render(
        hooks,
        tmp_path,
        "results/a/README.md",
        "[the README](../../../README.md#why) [`src/lmc/x.py`](../../../src/lmc/x.py) "
        "[missing](../../../nope.md) [index](../../index.md) [left out](../../README.md) "
        "[the logs](../logs/) [up](../a/) `[code](../../../README.md)`",
        pages,
    )
    assert (
        '<span title="README.md#why in the lmc repository (not part of this site)">the README'
        "</span> (<code>README.md#why</code> in the repository)"
    ) in html
    assert "><code>src/lmc/x.py</code></span> " in html  # the text was the path: shown once
    assert '<a href="../../../nope.md">missing</a>' in html  # left for mkdocs to report
    assert '<a href="../../index.md">index</a>' in html  # a page of the site: untouched
    assert "(<code>docs/README.md</code> in the repository)" in html  # excluded from the site
    assert "(<code>docs/results/logs/</code> in the repository)" in html  # a folder, no page
    assert '<a href="../a/README.md">up</a>' in html  # a folder with its page
    assert "<code>[code](../../../README.md)</code>" in html  # code is not a link


def test_grouped_parameters_document_each_name(hooks, caplog):
    code = '''
def f(a: int, b: int, c: int) -> int:
    """Sum.

    Args:
        a, b: the first two,
            on two lines.
        c: the last.
    """
'''
    extensions = griffe.load_extensions(f"{HOOKS}:GroupedParameters")
    with caplog.at_level(logging.WARNING):
        with griffe.temporary_visited_module(code, extensions=extensions) as module:
            sections = module["f"].docstring.parse("google")
    (params,) = [s for s in sections if s.kind.value == "parameters"]
    assert [(p.name, p.description) for p in params.value] == [
        ("a", "the first two,\non two lines."),
        ("b", "the first two,\non two lines."),
        ("c", "the last."),
    ]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_comment_docstrings_document_constants():
    code = """
#: The fewest pairs a verdict rests on,
#: over both cells.
MIN_PAIRS = 3
# a plain comment is no docstring
PLAIN = 1
WITH_STRING = 2
\"\"\"A docstring griffe reads itself.\"\"\"
"""
    extensions = griffe.load_extensions(f"{HOOKS}:CommentDocstrings")
    with griffe.temporary_visited_module(code, extensions=extensions) as module:
        docs = {name: module[name].docstring for name in ("MIN_PAIRS", "PLAIN", "WITH_STRING")}
    assert docs["MIN_PAIRS"].value == "The fewest pairs a verdict rests on,\nover both cells."
    assert docs["PLAIN"] is None
    assert docs["WITH_STRING"].value == "A docstring griffe reads itself."
