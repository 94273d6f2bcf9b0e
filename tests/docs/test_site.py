"""The documentation site (mkdocs.yml) builds offline with ``mkdocs build --strict``: no broken
link, no missing anchor, no page left out of the navigation, no docstring griffe cannot read;
the API reference holds every public name; the pages load nothing from the network."""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _missing(names: tuple[str, ...]) -> list[str]:
    out = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # its parent package is missing
            found = False
        if not found:
            out.append(name)
    return out


_MISSING = _missing(("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"))
pytestmark = pytest.mark.skipif(
    bool(_MISSING),
    reason=f"the site's packages are not installed ({', '.join(_MISSING)}): "
    "pip install -e '.[docs]' (scripts/test.sh installs the extra)",
)

# Runs `mkdocs build` with every network connection refused, so a theme or plugin that fetches
# something (fonts, inventories, images) fails the build instead of passing on a connected machine.
_OFFLINE_BUILD = """
import socket, sys

def refuse(*args, **kwargs):
    raise OSError("the documentation build must not use the network")

socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse

from mkdocs.__main__ import cli

cli(["build", "--strict", "--config-file", sys.argv[1], "--site-dir", sys.argv[2]])
"""


def build(out: Path) -> None:
    """``mkdocs build --strict`` of mkdocs.yml into ``out``, offline; fails with its warnings."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _OFFLINE_BUILD, str(ROOT / "mkdocs.yml"), str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    problems = [line for line in done.stderr.splitlines() if not line.startswith("INFO")]
    assert done.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(problems[-60:])


def check_results_pages(site: Path) -> None:
    """Every results page is built and listed on the Results overview."""
    studies = sorted(p.parent.name for p in DOCS.glob("results/*/README.md"))
    assert studies
    overview = (site / "results" / "index.html").read_text(encoding="utf-8")
    for study in studies:
        assert (site / "results" / study / "index.html").is_file(), study
        assert f'href="{study}/"' in overview, f"{study} is not on the Results overview"


def check_api_reference(site: Path) -> None:
    """Each package of the library has its page, ``docs/api/<name>.md`` (``::: lmc.<name>``),
    and every name of its ``__all__`` is there, under its package's path or, for a function that
    has the name of its own submodule (``lmc.metrics.barriers``), under its module's."""
    import lmc

    packages = [info.name for info in pkgutil.iter_modules(lmc.__path__)]
    for module_name in [f"lmc.{name}" for name in packages if name not in {"cli", "__main__"}]:
        short = module_name.removeprefix("lmc.")
        source = DOCS / "api" / f"{short}.md"
        assert source.is_file(), f"add {source.relative_to(ROOT)} with '::: {module_name}'"
        assert f"::: {module_name}\n" in source.read_text(encoding="utf-8")
        html = (site / "api" / short / "index.html").read_text(encoding="utf-8")
        module = importlib.import_module(module_name)
        missing = [
            name
            for name in module.__all__
            if f'id="{module_name}.{name}"' not in html
            and f'id="{getattr(getattr(module, name), "__module__", None)}.{name}"' not in html
        ]
        assert not missing, f"{module_name}: not in the API reference: {missing}"


def check_nothing_remote(site: Path) -> None:
    """Scripts, stylesheets, images and fonts all come with the site (links to other sites are
    fine: they are only followed when clicked)."""
    remote = re.compile(
        r"""<(?:script|img|link|iframe|source)\b[^>]*\b(?:src|href)=["']?(?:https?:)?//"""
    )
    offenders = [
        page.relative_to(site).as_posix()
        for page in site.rglob("*.html")
        if remote.search(page.read_text(encoding="utf-8"))
    ]
    assert not offenders, f"pages that load a remote resource: {offenders[:10]}"


def test_site_builds_offline_and_strict(tmp_path):
    """One build (about 10 s; one test, so parallel workers do not build it several times)."""
    build(tmp_path)
    for page in ("index.html", *(f"{p}/index.html" for p in ("science", "studies", "design"))):
        assert (tmp_path / page).is_file(), page
    check_results_pages(tmp_path)
    check_api_reference(tmp_path)
    check_nothing_remote(tmp_path)
