"""``lmc.perm`` split into sub-packages (issue 45): every module of the old flat layout still
imports under its old dotted name and is the very module it moved to, so code written against
the old names (and patches through them) keeps working."""

from __future__ import annotations

import importlib
import pickle
import subprocess
import sys

import pytest

import lmc.perm
from lmc.perm import MOVED_MODULES, moved_name


@pytest.mark.parametrize("old", sorted(MOVED_MODULES))
def test_an_old_module_name_is_the_moved_module(old):
    module = importlib.import_module(f"lmc.perm.{old}")
    new = importlib.import_module(f"lmc.perm.{MOVED_MODULES[old]}")
    assert module is new
    assert module.__spec__.name == new.__name__  # the module keeps its own spec
    assert getattr(lmc.perm, old) is new


def test_old_names_of_submodules_and_their_objects_are_the_same():
    # the old names are imported by name: a linter sorts an import of a name it cannot find on
    # disk as a third-party one
    _apply_rotations = importlib.import_module("lmc.perm.learned")._apply_rotations
    old_union_find = importlib.import_module("lmc.perm.trace.state").UnionFind
    from lmc.perm.methods.learned_alignment import _apply_rotations as moved
    from lmc.perm.symmetries.trace.state import UnionFind

    assert _apply_rotations is moved and old_union_find is UnionFind
    assert (
        importlib.import_module("lmc.perm.trace.state")
        is sys.modules["lmc.perm.symmetries.trace.state"]
    )
    assert moved_name("lmc.perm.trace.walk") == "lmc.perm.symmetries.trace.walk"
    assert moved_name("lmc.perm.methods.registry") is None
    with pytest.raises(AttributeError):
        lmc.perm.no_such_module  # noqa: B018


def test_a_patch_through_the_old_name_reaches_the_code(monkeypatch):
    old = importlib.import_module("lmc.perm.lap")
    monkeypatch.setattr(old, "AUTO_LAPX_MIN", 7)
    from lmc.perm.solvers import assignment

    assert assignment.AUTO_LAPX_MIN == 7


def test_objects_pickled_under_their_classes_load_back():
    spec = lmc.perm.PermutationSpec.from_dict({"w": ("p", None)}, shapes={"w": (3, 2)})
    assert pickle.loads(pickle.dumps(spec)) == spec


def test_an_old_name_imports_first_in_a_fresh_process():
    code = (
        "import lmc.perm.weight_match as wm, sys; "
        "assert wm is sys.modules['lmc.perm.methods.weight_matching']; "
        "from lmc.perm.canonical import canonicalize; import lmc.perm; "
        "assert canonicalize is lmc.perm.canonicalize; print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr
