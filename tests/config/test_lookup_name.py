"""``lmc.config.lookup_name``: a registry's entry by name, or one ``LmcError`` naming the known
names (what ``lmc.data.get_task`` and ``lmc.merge.get_path_kind`` say about an unknown name)."""

from __future__ import annotations

import pytest

from lmc.config import LmcError, lookup_name

TABLE = {"line": 1, "bezier": 2, "chain": 3}


def test_a_known_name_gives_its_entry():
    assert lookup_name(TABLE, "bezier", "path kind") == 2


@pytest.mark.parametrize("key", ["spline", 3, None])
def test_an_unknown_name_lists_the_known_ones_in_table_order(key):
    with pytest.raises(LmcError) as caught:
        lookup_name(TABLE, key, "path kind")
    assert str(caught.value) == f"unknown path kind {key!r}: use one of line, bezier, chain"


def test_the_listed_names_may_be_given():
    with pytest.raises(LmcError, match=r"use one of bezier, chain, line$"):
        lookup_name(TABLE, "spline", "path kind", sorted(TABLE))


def test_the_registries_say_the_same():
    from lmc.data.tasks import TASKS, get_task
    from lmc.merge.curves import PATH_KINDS, get_path_kind

    with pytest.raises(LmcError, match=f"unknown task 'x': use one of {', '.join(sorted(TASKS))}$"):
        get_task("x")
    with pytest.raises(
        LmcError, match=f"unknown path kind 'x': use one of {', '.join(PATH_KINDS)}$"
    ):
        get_path_kind("x")
