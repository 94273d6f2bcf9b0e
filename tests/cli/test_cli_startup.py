"""``lmc --help`` and ``lmc recipes`` start without importing torch or the library."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lmc.cli.recipes import recipe_names
from lmc.experiments import list_recipes, load_study

# runs main(argv) in a fresh interpreter and prints the heavy modules it imported
PROBE = """
import json, sys
from lmc.cli.main import main
try:
    main({argv!r})
except SystemExit:
    pass
heavy = sorted(m for m in ("torch", "numpy", "lmc.config", "lmc.models", "lmc.perm")
               if m in sys.modules)
print("HEAVY" + json.dumps(heavy))
"""


def _heavy_modules(argv: list[str]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(argv=argv)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    line = next(x for x in done.stdout.splitlines() if x.startswith("HEAVY"))
    return json.loads(line.removeprefix("HEAVY"))


@pytest.mark.parametrize(
    "argv", [["--help"], [], ["--version"], ["recipes"], ["recipes", "show", "lewc-digits-mlp"]]
)
def test_top_level_help_and_recipes_import_no_torch(argv):
    assert _heavy_modules(argv) == []


def test_a_verb_help_builds_only_that_verb():
    """lmc align --help imports the alignment methods (its flags come from them) but not the
    model registry's training verb; lmc train --help reads the model registry."""
    heavy = _heavy_modules(["train", "--help"])
    assert "lmc.models" in heavy and "lmc.perm" not in heavy


def test_top_level_parser_imports_no_verb_module():
    code = (
        "import sys; from lmc.cli.main import build_parser; build_parser([]); "
        "print(sorted(m for m in sys.modules if m.startswith('lmc.cli.') and m != 'lmc.cli.main'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_light_recipe_list_is_the_library_list():
    assert recipe_names() == list_recipes()


def test_light_recipe_descriptions_are_the_resolved_ones(capsys):
    from lmc.cli.main import main

    assert main(["recipes", "--json"]) == 0
    described = json.loads(capsys.readouterr().out)["recipes"]
    assert described == {name: load_study(name)[0]["description"] for name in list_recipes()}
