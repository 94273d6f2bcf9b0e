"""An alignment method is one record (issue 45 item 1): registered in one place, with its label,
its place in tables, its plotting style and its docs phrase, it reaches the order of methods in
tables and figures (``METHOD_ORDER``), the figures' styles (``METHOD_STYLE``, ``method_style``)
and the generated method lists and settings rows of docs/studies.md, with no other file touched.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lmc.config import LmcError
from lmc.experiments import cells
from lmc.experiments.width_settings import method_key_rows
from lmc.perm.methods import (
    AlignmentMethod,
    MethodOutput,
    MethodSetting,
    MethodStyle,
    all_methods,
    register_method,
    unregister_method,
)
from lmc.report import results, style

STUDIES = Path(__file__).resolve().parents[2] / "docs" / "studies.md"


def _shift(job, *, by: int) -> MethodOutput:
    return MethodOutput(
        {g: torch.roll(torch.arange(n), by) for g, n in job.spec.group_sizes.items()}
    )


TOY = AlignmentMethod(
    "toyshift",
    _shift,
    "roll every group by a fixed offset (a test method)",
    settings=(MethodSetting("by", 1, "units to roll by", minimum=0),),
    label="shifted units",
    order=25,  # between weight (20) and onepass (30)
    style=MethodStyle("#117733", "d"),
    summary="every group rolled by `toyshift_by` units",
)


@pytest.fixture()
def toy():
    register_method(TOY)
    yield TOY
    unregister_method(TOY.name)


def test_the_records_give_todays_order_and_styles():
    """The built-in records reproduce the order and styles the committed figures were drawn with."""
    assert cells.METHOD_ORDER == (
        "none", "canonical", "weight", "onepass", "activation", "ste", "orthogonal",
        "orthogonal-activation", "learned", "random",
    )  # fmt: skip
    assert style.METHOD_STYLE == {
        "none": ("#0072B2", "o", "no permutation"),
        "canonical": ("#332288", "o", "canonical form, no alignment"),
        "weight": ("#D55E00", "s", "weight matching"),
        "activation": ("#009E73", "^", "activation matching"),
        "ste": ("#CC79A7", "D", "straight-through estimator"),
        "random": ("#E69F00", "v", "random permutation"),
        "onepass": ("#56B4E9", "P", "one-pass matching"),
    }
    # the methods without a style of their own: a spare one, picked from the name, and the name
    spare = style._EXTRA[sum(map(ord, "orthogonal")) % len(style._EXTRA)]
    assert style.method_style("orthogonal") == (*spare, "orthogonal")
    assert style.method_style("random-direction")[2] == "random-direction"


def test_a_registered_method_takes_its_place_in_tables_and_figures(toy):
    order = cells.METHOD_ORDER
    assert order[order.index("weight") + 1] == "toyshift"
    assert order.index("toyshift") + 1 == order.index("onepass")
    assert results.METHOD_ORDER == order
    ranked = sorted(
        ["onepass", "zzz-unknown", "toyshift", "none", "weight"], key=cells.method_sort_key
    )
    assert ranked == ["none", "weight", "toyshift", "onepass", "zzz-unknown"]
    assert style.METHOD_STYLE["toyshift"] == ("#117733", "d", "shifted units")
    assert style.method_style("toyshift") == ("#117733", "d", "shifted units")


def test_a_method_registered_in_one_place_reaches_the_docs_generator(toy, load_script):
    pages = load_script("results_pages")
    key_row = "| `toyshift_by` | integer | `1` | ≥ 0 | toyshift merges | `toyshift`: units to roll"
    assert any(row.startswith(key_row) for row in method_key_rows())
    merge_row = pages.merge_methods_row()
    assert "`learned`, `orthogonal-activation`, `toyshift`, or the control" in merge_row
    assert "`toyshift` (every group rolled by `toyshift_by` units)" in merge_row
    assert "`orthogonal-activation`, `toyshift` |" in pages.onset_methods_row()
    page = pages.render_studies_doc(STUDIES.read_text())
    assert "| `toyshift_by` |" in page
    assert page.count("`toyshift` (every group rolled by `toyshift_by` units)") == 1
    # without the toy, the generator gives the committed page
    unregister_method("toyshift")
    assert pages.render_studies_doc(STUDIES.read_text()) == STUDIES.read_text()


def test_a_method_without_order_or_style_follows_the_ordered_ones_by_name():
    plain = AlignmentMethod("zz-plain", _shift, "no order, no style", settings=TOY.settings)
    register_method(plain)
    try:
        assert "zz-plain" not in cells.METHOD_ORDER
        assert cells.method_sort_key("zz-plain") == (len(cells.METHOD_ORDER), "zz-plain")
        assert "zz-plain" not in style.METHOD_STYLE
        colour, marker, label = style.method_style("zz-plain")
        assert (colour, marker) in style._EXTRA and label == "zz-plain"
        assert plain.label == "zz-plain" and plain.summary == "zz-plain"
    finally:
        unregister_method("zz-plain")


def test_labels_default_to_the_name_and_bad_presentation_fields_are_refused():
    assert [m.label for m in all_methods() if m.style is None] == [
        "orthogonal", "learned", "orthogonal-activation",
    ]  # fmt: skip
    with pytest.raises(LmcError, match="order must be a finite number"):
        AlignmentMethod("x", _shift, "x", order=float("nan"))
    with pytest.raises(LmcError, match="style must be a MethodStyle"):
        AlignmentMethod("x", _shift, "x", style=("#000000", "o"))


TOY_MODULE = """
import torch
from lmc.perm.methods import AlignmentMethod, MethodOutput, register_method

def _keep(job):
    return MethodOutput({g: torch.arange(n) for g, n in job.spec.group_sizes.items()})

register_method(AlignmentMethod("toyfile", _keep, "keep every unit (a test method)"))
"""


def test_a_method_is_its_module_alone(tmp_path, monkeypatch):
    """A module dropped beside the built-in methods registers itself: no import line to add
    (``import_package_modules``, which ``lmc/perm/methods/__init__.py`` calls on its folder)."""
    import sys

    from lmc.perm.methods import import_package_modules, method_names

    package = tmp_path / "toy_methods"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "keep_all.py").write_text(TOY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert "toyfile" not in method_names()
        assert import_package_modules("toy_methods", [str(package)]) == ["keep_all"]
        assert method_names()[-1] == "toyfile"
        assert import_package_modules("toy_methods", [str(package)]) == []  # imported once
    finally:
        unregister_method("toyfile")
        for name in ("toy_methods", "toy_methods.keep_all"):
            sys.modules.pop(name, None)


def test_a_module_that_does_not_import_is_named(tmp_path, monkeypatch):
    import sys

    from lmc.perm.methods import import_package_modules

    package = tmp_path / "broken_methods"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "needs_more.py").write_text("import a_package_nobody_installed\n")
    (package / "keep_all copy.py").write_text("raise SystemExit('never imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(LmcError, match=r"needs_more\.py .*a_package_nobody_installed"):
            import_package_modules("broken_methods", [str(package)])
    finally:
        sys.modules.pop("broken_methods", None)


def test_every_module_of_the_methods_folder_is_imported():
    import sys

    import lmc.perm.methods as methods

    folder = Path(methods.__file__).parent
    modules = {p.stem for p in folder.glob("*.py")} - {"__init__"}
    assert all(f"lmc.perm.methods.{name}" in sys.modules for name in modules)
