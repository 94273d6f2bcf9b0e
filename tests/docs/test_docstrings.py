"""Every public name of lmc has a docstring: the API reference of the site is made of them.

The public names are each package's ``__all__`` (every top-level package and module of
``lmc`` but the command, ``lmc.cli``, declares one) and the public top-level functions and
classes of ``lmc.stats``. The rule:

- a class, a function (or any routine) and a module need a docstring of their own: a class
  does not inherit one from its base, and the text ``dataclass`` or ``NamedTuple`` writes for a
  class without one (``Cell(n: int, ...)``) does not count;
- a value (a constant, a table, a type alias such as ``StateDict``) keeps no docstring at run
  time (``inspect.getdoc`` would answer its type's), so its docstring is in the source: a
  ``#:`` comment block right above its assignment (the Sphinx convention) or a string right
  below it, as the site reads them (griffe, with docs/hooks.py's ``CommentDocstrings``).

``KNOWN_UNDOCUMENTED`` lists the names that break the rule today (none now); a name there
that has one fails the test, so the list only shrinks.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import types
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pytest

import lmc

#: lmc's top-level packages and modules without public names of their own
NOT_LIBRARY = {"cli", "__main__"}
# TODO(issue 45): docstrings for these, in packages another change of issue 45 is editing
KNOWN_UNDOCUMENTED: set[str] = set()
HOOKS = Path(__file__).resolve().parents[2] / "docs" / "hooks.py"


def library_modules() -> list[str]:
    """``lmc.<name>`` of every top-level package and module of lmc but the command."""
    return sorted(
        f"lmc.{info.name}"
        for info in pkgutil.iter_modules(lmc.__path__)
        if info.name not in NOT_LIBRARY
    )


def public_names(module: types.ModuleType) -> list[str]:
    """The module's ``__all__``; for ``lmc.stats`` also its other public functions and classes."""
    names = list(module.__all__)
    if module.__name__ == "lmc.stats":
        names += [
            name
            for name, value in vars(module).items()
            if not name.startswith("_")
            and (inspect.isfunction(value) or inspect.isclass(value))
            and value.__module__ == module.__name__
            and name not in names
        ]
    return names


def has_docstring(value: object) -> bool | None:
    """Whether ``value`` carries a docstring of its own; ``None`` for a value the rule exempts."""
    if inspect.isclass(value):
        doc = value.__dict__.get("__doc__")
        generated = doc is not None and re.match(rf"{re.escape(value.__name__)}\(", doc)
        return bool(doc and doc.strip()) and not generated
    if inspect.isroutine(value) or inspect.ismodule(value):
        return bool(inspect.getdoc(value))
    return None


def undocumented(module: types.ModuleType) -> list[str]:
    """The public names of ``module`` (classes, functions, modules) without a docstring."""
    return [
        f"{module.__name__}.{name}"
        for name in public_names(module)
        if has_docstring(getattr(module, name)) is False
    ]


def undocumented_values(module: types.ModuleType, package) -> list[str]:
    """The public values of ``module`` whose source gives no docstring, read by griffe as the
    site reads them (``package``: lmc loaded by griffe)."""
    out = []
    for name in public_names(module):
        if has_docstring(getattr(module, name)) is not None:
            continue
        found = package[f"{module.__name__.removeprefix('lmc.')}.{name}"]
        target = found.final_target if found.is_alias else found
        if not (target.docstring and target.docstring.value.strip()):
            out.append(f"{module.__name__}.{name}")
    return out


def test_every_library_package_declares_its_public_names():
    modules = library_modules()
    assert "lmc.stats" in modules and "lmc.perm" in modules
    without = [name for name in modules if not hasattr(importlib.import_module(name), "__all__")]
    assert not without, f"declare the public names in __all__: {without}"


@pytest.mark.parametrize("name", library_modules())
def test_every_public_name_has_a_docstring(name):
    module = importlib.import_module(name)
    assert inspect.getdoc(module), f"{name} has no module docstring"
    found = undocumented(module)
    missing = [n for n in found if n not in KNOWN_UNDOCUMENTED]
    assert not missing, f"public names without a docstring: {missing}"
    stale = [n for n in _known(module, values=False) if n not in found]
    assert not stale, f"these have a docstring now: remove them from KNOWN_UNDOCUMENTED: {stale}"


def test_every_public_value_has_a_docstring_in_its_source():
    griffe = pytest.importorskip(
        "griffe", reason="the site's packages are not installed: pip install -e '.[docs]'"
    )
    extensions = griffe.load_extensions(f"{HOOKS}:CommentDocstrings")
    package = griffe.load(
        "lmc", search_paths=[str(Path(lmc.__file__).parents[1])], extensions=extensions
    )
    missing, stale = [], []
    for name in library_modules():
        module = importlib.import_module(name)
        found = undocumented_values(module, package)
        missing += [n for n in found if n not in KNOWN_UNDOCUMENTED]
        stale += [n for n in _known(module, values=True) if n not in found]
    assert not missing, f"public values without a #: comment or docstring: {missing}"
    assert not stale, f"these have a docstring now: remove them from KNOWN_UNDOCUMENTED: {stale}"


def _known(module: types.ModuleType, *, values: bool) -> list[str]:
    """The names of ``module`` in ``KNOWN_UNDOCUMENTED``: its values, or the others."""
    return [
        f"{module.__name__}.{name}"
        for name in public_names(module)
        if f"{module.__name__}.{name}" in KNOWN_UNDOCUMENTED
        and (has_docstring(getattr(module, name)) is None) == values
    ]


def test_the_rule_catches_a_missing_docstring():
    """The check itself: what it must flag and what it must let pass."""

    @dataclass
    class Plain:
        x: int

    @dataclass
    class Documented:
        """A documented record."""

        x: int

    class Pair(NamedTuple):
        a: int

    class Child(Documented):
        pass

    def bare():
        return None

    def documented():
        """Does nothing."""

    module = types.ModuleType("lmc_fake", "A module.")
    for value in (Plain, Documented, Pair, Child, bare, documented):
        setattr(module, value.__name__, value)
    module.LIMIT = 3
    module.TABLE = {"a": 1}
    module.__all__ = [
        "Plain",
        "Documented",
        "Pair",
        "Child",
        "bare",
        "documented",
        "LIMIT",
        "TABLE",
    ]
    assert undocumented(module) == [f"lmc_fake.{n}" for n in ("Plain", "Pair", "Child", "bare")]
