"""The house's import graph: no circle between any two modules of src/lmc, and data flows one
way through the packages (docs/design.md: each package imports only from those before it; inside
``lmc.perm``, from the solvers to the symmetries to the methods).

An import of a module's old name (``lmc.perm.MOVED_MODULES``: ``lmc.perm.spec`` is
``lmc.perm.symmetries.permutation_spec``) is an edge to the module it names now."""

from __future__ import annotations

import ast
from pathlib import Path

import lmc
from lmc.perm import moved_name

SRC = Path(lmc.__file__).resolve().parent
#: docs/design.md's pipeline; ``cli`` sits on top
LAYERS = (
    "config",
    "data",
    "models",
    "store",
    "train",
    "perm",
    "merge",
    "metrics",
    "analysis",
    "pair",
    "experiments",
    "report",
    "cli",
)


def _modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package's __init__)."""
    out = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if package else parts)] = (path, package)
    return out


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(test)


def _imports(name: str, path: Path, package: bool, modules) -> set[str]:
    """Every lmc module ``name`` imports, at the top or inside a function (not for typing)."""
    found: set[str] = set()
    stack: list[ast.AST] = [ast.parse(path.read_text())]
    while stack:
        node = stack.pop()
        if _type_checking(node):
            continue
        stack.extend(ast.iter_child_nodes(node))
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if package else name.split(".")[:-1]
                here = here[: len(here) - node.level + 1]
                base = ".".join([*here, *([node.module] if node.module else [])])
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        targets = [moved_name(t) or t for t in targets]
        # a module reads its own package's names through that package: not an edge
        found |= {t for t in targets if t in modules and not name.startswith(t + ".") and t != name}
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {n: _imports(n, p, pkg, modules) for n, (p, pkg) in modules.items()}


def test_no_import_circle_anywhere_in_lmc():
    graph = _graph()
    assert graph["lmc.perm.methods.weight_matching"], "the graph sees imports"
    assert "lmc.perm.symmetries.canonical_form" in graph["lmc.perm.symmetries.widening"]

    def circle_from(start: str) -> list[str] | None:
        stack, seen = [(start, [start])], set()
        while stack:
            node, trail = stack.pop()
            for nxt in sorted(graph[node]):
                if nxt == start:
                    return [*trail, start]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
        return None

    circles = [c for c in map(circle_from, sorted(graph)) if c]
    assert not circles, " -> ".join(circles[0])


def test_packages_import_only_from_the_packages_before_them():
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    upward = []
    for name, imported in _graph().items():
        parts = name.split(".")
        if len(parts) < 2 or parts[1] not in rank:
            continue  # lmc itself, lmc.__main__ and top-level modules
        for target in imported:
            layer = target.split(".")[1] if target.count(".") else None
            if layer in rank and rank[layer] > rank[parts[1]]:
                upward.append(f"{name} imports {target}")
    assert not upward, upward


#: ``lmc.perm``'s sub-packages, each importing only from those before it
PERM_LAYERS = ("solvers", "symmetries", "methods")


def test_perm_subpackages_import_only_from_those_before_them():
    rank = {layer: i for i, layer in enumerate(PERM_LAYERS)}
    graph = _graph()
    assert any(t.startswith("lmc.perm.symmetries.") for t in graph["lmc.perm.methods.registry"])

    def layer(name: str) -> str | None:
        parts = name.split(".")
        return parts[2] if len(parts) > 3 and parts[:2] == ["lmc", "perm"] else None

    upward = [
        f"{name} imports {target}"
        for name, imported in graph.items()
        if layer(name) in rank
        for target in imported
        if layer(target) in rank and rank[layer(target)] > rank[layer(name)]
    ]
    assert not upward, upward


def test_an_old_module_name_is_an_edge_to_the_module_it_names_now(tmp_path):
    source = tmp_path / "fake.py"
    source.write_text(
        "from lmc.perm.widen import widen_pair\nimport lmc.perm.trace.state\n"
        "from lmc.perm.methods import get_method\n"
    )
    found = _imports("lmc.fake", source, False, _modules())
    assert found == {
        "lmc.perm.symmetries.widening",
        "lmc.perm.symmetries.trace.state",
        "lmc.perm.methods",
    }
