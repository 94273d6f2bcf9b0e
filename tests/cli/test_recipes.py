"""lmc recipes lists the packaged recipes and prints one to edit."""

import json

from lmc.cli.main import main
from lmc.experiments import list_recipes, recipe_path


def test_recipes_lists_every_packaged_recipe(capsys):
    assert main(["recipes"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == list_recipes()
    assert main(["recipes", "--json"]) == 0
    assert sorted(json.loads(capsys.readouterr().out)["recipes"]) == list_recipes()


def test_recipes_show_prints_the_toml(capsys):
    assert main(["recipes", "show", "lewc-digits-mlp"]) == 0
    assert capsys.readouterr().out == recipe_path("lewc-digits-mlp").read_text(encoding="utf-8")


def test_recipes_show_unknown_is_one_line(capsys):
    assert main(["recipes", "show", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "lewc-digits-mlp" in err


def test_interpolate_of_a_file_says_it_is_a_file(tmp_path, capsys):
    f = tmp_path / "model.pt"
    f.write_bytes(b"x")
    assert main(["interpolate", str(f), str(f), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is a file, not a run" in err
