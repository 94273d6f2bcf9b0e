"""docs/design.md against the code: every ``lmc.…`` name it cites imports, every file or folder
it names exists (an old name of ``lmc.perm.MOVED_MODULES`` counts as the module it names now),
its table's "imports (directly)" column is each package's real imports, and its diagram's arrows
are the package graph with the imports a chain of arrows implies left out.

The import graph is ``tests/test_import_graph.py``'s (imports at the top or inside a function,
not for typing); an import is "inside functions" when the module's top level, read without its
function bodies, does not make it."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "design.md"
SRC = ROOT / "src" / "lmc"


def _load_import_graph():
    spec = importlib.util.spec_from_file_location(
        "lmc_tests_import_graph", ROOT / "tests" / "test_import_graph.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GRAPH = _load_import_graph()

#: the arrows of design.md's diagram: importer -> the packages it imports that no chain of other
#: arrows already reaches (``perm/solvers`` in the drawing is ``perm.solvers`` here)
DRAWN = {
    "data": {"config"},
    "models": {"data"},
    "store": {"models"},
    "train": {"store"},
    "perm.solvers": {"config"},
    "perm.symmetries": {"perm.solvers", "store"},
    "perm.methods": {"perm.symmetries"},
    "perm": {"perm.methods"},
    "merge": {"train", "perm"},
    "metrics": {"merge"},
    "analysis": {"metrics"},
    "pair": {"analysis"},
    "experiments": {"pair"},
    "stats": {"config"},
    "report": {"experiments", "stats"},
    "cli": {"report"},
}
#: the dotted arrows: imports made only inside functions
DOTTED_ARROWS = {("store", "models"), ("merge", "perm"), ("pair", "analysis"), ("cli", "report")}


def node(module: str) -> str | None:
    """The package a module belongs to, as the page names it (``perm.symmetries`` for the
    modules of ``lmc.perm``'s sub-packages); ``None`` for ``lmc`` itself and ``lmc.__main__``."""
    parts = module.split(".")
    if len(parts) < 2 or parts[1] == "__main__":
        return None
    if parts[1] == "perm" and len(parts) > 2 and parts[2] in GRAPH.PERM_LAYERS:
        return f"perm.{parts[2]}"
    return parts[1]


def _without_function_bodies(path: Path) -> str:
    tree = ast.parse(path.read_text())
    for item in ast.walk(tree):
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            item.body = [ast.Pass()]
    return ast.unparse(tree)


def package_imports(tmp_path: Path) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """``(every, top)``: package -> the packages it imports (at the top or inside a function),
    and those its modules import at the top."""
    modules = GRAPH._modules()
    every: dict[str, set[str]] = {}
    top: dict[str, set[str]] = {}
    for name, (path, package) in modules.items():
        here = node(name)
        if here is None:
            continue
        stripped = tmp_path / (name + ".py")
        stripped.write_text(_without_function_bodies(path))
        for found, into in (
            (GRAPH._imports(name, path, package, modules), every),
            (GRAPH._imports(name, stripped, package, modules), top),
        ):
            targets = {node(t) for t in found} - {None, here}
            into.setdefault(here, set()).update(targets)
    return every, top


def page() -> str:
    return PAGE.read_text()


def table_rows() -> dict[str, str]:
    """package (as :func:`node` names it) -> its "imports (directly)" cell."""
    text = page()
    section = text[text.index("| package | holds | imports (directly) |") :]
    rows = {}
    for line in section.splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        name = re.match(r"`lmc\.([\w.]+)`", cells[0]).group(1)
        rows[name] = cells[-1]
    return rows


def documented(cell: str) -> tuple[set[str], set[str]]:
    """``(top, inside)`` of an imports cell: ``"`a`, `b`; inside functions `c`"``."""
    head, _, inside = cell.partition("inside functions")
    names = lambda text: set(re.findall(r"`([\w.]+)`", text))  # noqa: E731
    return names(head), names(inside)


def resolves(dotted: str) -> bool:
    """Whether ``lmc.a.b.c`` is a module, or an attribute of the longest module prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def path_exists(text: str) -> bool:
    """A path the page names: from the repository root, from ``src/lmc``, the end of a path
    under ``src/lmc`` (``trace/``, ``assignment.py``), or an old module name that still imports
    (``perm/trace/``, ``perm/methods.py``)."""
    bare = text.rstrip("/")
    if (ROOT / bare).exists() or (SRC / bare).exists():
        return True
    if any(str(p).endswith("/" + bare) for p in SRC.rglob("*")):
        return True
    dotted = "lmc." + bare.removeprefix("src/lmc/").removesuffix(".py").replace("/", ".")
    return importlib.util.find_spec(dotted) is not None if bare.count("/") else False


DOTTED = re.compile(r"(?<![\w./])lmc(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(r"`([\w./-]+(?:\.py|/))`")


def test_every_lmc_name_on_the_page_imports():
    names = sorted(set(DOTTED.findall(page())))
    assert len(names) > 20, "the page cites lmc names"
    missing = [n for n in names if not resolves(n)]
    assert not missing, f"design.md cites names that do not import: {missing}"


def test_a_wrong_name_is_caught():
    assert resolves("lmc.perm.methods.registry.AlignmentMethod")
    assert resolves("lmc.perm.spec.PermutationSpec")  # an old name of MOVED_MODULES
    assert not resolves("lmc.perm.methods.registry.NoSuchName")
    assert not resolves("lmc.no_such_package")
    assert path_exists("perm/trace/") and path_exists("trace/")
    assert not path_exists("perm/no_such_module.py")


def test_every_file_the_page_names_exists():
    paths = sorted(set(PATH.findall(page())))
    assert "src/lmc/perm/methods/" in paths
    missing = [p for p in paths if not path_exists(p)]
    assert not missing, f"design.md names files that are not there: {missing}"


def test_the_table_lists_every_package_and_its_imports(tmp_path):
    every, top = package_imports(tmp_path)
    rows = table_rows()
    assert set(every) <= set(rows), f"packages without a row: {set(every) - set(rows)}"
    wrong = []
    for name, cell in rows.items():
        said_top, said_inside = documented(cell)
        real_top = top.get(name, set())
        real_inside = every.get(name, set()) - real_top
        if (said_top, said_inside) != (real_top, real_inside):
            wrong.append(
                f"lmc.{name}: the page says {sorted(said_top)} + inside functions "
                f"{sorted(said_inside)}; the code {sorted(real_top)} + {sorted(real_inside)}"
            )
    assert not wrong, "\n".join(wrong)


def _reduction(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Each package's imports less those a chain of two or more imports reaches."""

    def reach(start: set[str]) -> set[str]:
        seen, stack = set(), list(start)
        while stack:
            name = stack.pop()
            if name not in seen:
                seen.add(name)
                stack.extend(graph.get(name, ()))
        return seen

    return {
        a: {b for b in targets if b not in reach(targets - {b})} for a, targets in graph.items()
    }


def test_the_diagram_draws_the_import_graph(tmp_path):
    every, top = package_imports(tmp_path)
    drawn = {a: b for a, b in _reduction(every).items() if b}
    assert drawn == DRAWN
    inside = {(a, b) for a, targets in drawn.items() for b in targets if b not in top.get(a, ())}
    assert inside == DOTTED_ARROWS
    text = page()
    diagram = text[text.index("```\nconfig") : text.index("```", text.index("```\nconfig") + 3)]
    for name in every:
        assert name.replace(".", "/") in diagram, f"{name} is not in the diagram"


@pytest.mark.parametrize("cell", ["`config`, `data`; inside functions `models`", "none"])
def test_an_imports_cell_reads_as_written(cell):
    top, inside = documented(cell)
    assert (top, inside) == (({"config", "data"}, {"models"}) if "`" in cell else (set(), set()))
