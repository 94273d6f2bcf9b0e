"""``lmc VERB --help`` answers without importing torch (issue 45, item 5).

Verbs whose options come from registries that import torch (the model zoo, the alignment
methods) pay that import once: their help text is stored (:mod:`lmc.cli.help_cache`) and the
next call prints it. Each case runs ``lmc VERB --help`` twice in fresh interpreters with a
private cache folder and asks whether the second imported torch; the stored text must be the
text the parser builds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from lmc.cli import help_cache
from lmc.cli.main import VERBS, build_parser, help_verb, main

PROBE = """
import sys
from lmc.cli.main import main
try:
    code = main([{verb!r}, "--help"])
except SystemExit as exc:
    code = exc.code
print("TORCH", "torch" in sys.modules)
print("CODE", code)
"""


def _probe(verb: str, cache) -> str:
    env = {**os.environ, help_cache.CACHE_ENV: str(cache), "COLUMNS": "100"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(verb=verb)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=env,
    )
    assert f"usage: lmc {verb}" in done.stdout, done.stderr
    assert "CODE 0" in done.stdout.splitlines() or "CODE None" in done.stdout.splitlines()
    return done.stdout


@pytest.mark.parametrize("verb", list(VERBS))
def test_verb_help_imports_no_torch_once_stored(verb, tmp_path):
    first = _probe(verb, tmp_path)
    second = _probe(verb, tmp_path)
    assert "TORCH False" in second.splitlines(), f"lmc {verb} --help imported torch again"
    assert first.splitlines()[:-2] == second.splitlines()[:-2]  # the help, without the probe's


def _help(verb: str, flag: str) -> None:
    """``lmc VERB FLAG``, which exits with status 0 as argparse's help does."""
    with pytest.raises(SystemExit) as done:
        main([verb, flag])
    assert done.value.code == 0


@pytest.mark.parametrize("verb", ["train", "align", "interpolate"])
def test_stored_help_is_the_built_help(verb, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(help_cache.CACHE_ENV, str(tmp_path))
    _help(verb, "--help")
    printed = capsys.readouterr().out
    with pytest.raises(SystemExit):  # what argparse's own help action prints, no store
        build_parser([verb]).parse_args([verb, "--help"])
    assert printed == capsys.readouterr().out
    assert help_cache.stored_help(verb, help_cache.help_key(verb)) == printed
    _help(verb, "-h")  # from the store now
    assert capsys.readouterr().out == printed


def test_a_stale_record_is_rebuilt(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(help_cache.CACHE_ENV, str(tmp_path))
    record = {"key": "an old key", "text": "usage: lmc align STALE\n"}
    (tmp_path / "align.json").write_text(json.dumps(record))
    assert help_cache.stored_help("align", help_cache.help_key("align")) is None
    _help("align", "--help")
    printed = capsys.readouterr().out
    assert "STALE" not in printed and printed.startswith("usage: lmc align")
    assert json.loads((tmp_path / "align.json").read_text())["text"] == printed


def test_the_key_follows_the_terminal_width_and_lmc_settings(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    narrow = help_cache.help_key("align")
    monkeypatch.setenv("COLUMNS", "140")
    wide = help_cache.help_key("align")
    monkeypatch.setenv("LMC_RUNS", "/elsewhere")
    elsewhere = help_cache.help_key("align")
    assert len({narrow, wide, elsewhere}) == 3
    assert help_cache.help_key("merge") != elsewhere


def test_the_key_follows_the_colour_settings(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    plain = help_cache.help_key("train")
    monkeypatch.setenv("NO_COLOR", "1")
    assert help_cache.help_key("train") != plain


def test_the_source_state_reads_recipes_and_contents():
    """``lmc sweep --help`` lists the recipes: the packaged TOML files enter the key, by content."""
    rows = help_cache._source_state()
    assert any(row.startswith("recipes/") and ".toml:" in row for row in rows)
    assert not any("__pycache__" in row for row in rows)


def test_the_key_follows_the_source(monkeypatch):
    before = help_cache.help_key("align")
    edited = [*help_cache._source_state(), "recipes/a-new-recipe.toml:0123abcd"]
    monkeypatch.setattr(help_cache, "_source_state", lambda: edited)
    assert help_cache.help_key("align") != before


def test_no_cache_and_an_unwritable_cache_are_no_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(help_cache.CACHE_ENV, "")
    assert help_cache.cache_folder() is None
    _help("merge", "--help")
    assert capsys.readouterr().out.startswith("usage: lmc merge")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(help_cache.CACHE_ENV, str(blocker / "help"))
    _help("merge", "--help")
    assert capsys.readouterr().out.startswith("usage: lmc merge")
    assert help_cache.stored_help("merge", help_cache.help_key("merge")) is None


def test_other_help_lines_build_their_parser(tmp_path, monkeypatch, capsys):
    """``lmc train --model gpt --help`` shows gpt's options alone: never from the store."""
    monkeypatch.setenv(help_cache.CACHE_ENV, str(tmp_path))
    assert help_verb(["train", "--model", "gpt", "--help"]) is None
    assert help_verb(["train", "--help"]) == "train"
    assert help_verb(["nonsense", "--help"]) is None
    with pytest.raises(SystemExit):
        main(["train", "--model", "gpt", "--help"])
    assert "options of model gpt" in capsys.readouterr().out
    assert not (tmp_path / "train.json").exists()
