"""The house's import graph: no circle between any two modules of src/lmc, and data flows one
way through the packages (docs/design.md: each package imports only from those before it)."""

from __future__ import annotations

import ast
from pathlib import Path

import lmc

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
        # a module reads its own package's names through that package: not an edge
        found |= {t for t in targets if t in modules and not name.startswith(t + ".") and t != name}
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {n: _imports(n, p, pkg, modules) for n, (p, pkg) in modules.items()}


def test_no_import_circle_anywhere_in_lmc():
    graph = _graph()
    assert graph["lmc.perm.weight_match"], "the graph sees imports"

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
