"""The guide's Hugging Face language-model example (``<!-- test: hf-text -->``, in docs/guide.md:
the one block so marked in the README or a page under docs/) runs as written (issue 29): two
GPT-2 ``save_pretrained`` folders with their tokenizer, a text file, and ``lmc interpolate
--hf-model FOLDER --data corpus.txt`` without and with weight matching.

The only change to the block's lines: the example script trains for 5 steps on 60,000
characters (``--steps 5 --chars 60000``) instead of its defaults, to keep the test short.
The corpus is Debian's fortunes where the ``fortunes`` package is installed (scripts/test.sh
installs it where apt can) and the Python Language Reference of Python's standard library
otherwise (issue 41: a fresh machine has no fortunes); either gives the calibration's 5 folds
more than 5 test windows, which :func:`test_either_corpus_gives_the_calibration_enough_windows`
checks for the one this machine lacks too.
"""

from __future__ import annotations

import json
import math
import re
import runpy
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from lmc.cli.main import main

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- test: hf-text -->"
MANUAL = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]  # where the block may be
SHORT = ["--steps", "5", "--chars", "60000"]
CALIBRATION_FOLDS = 5  # lmc interpolate --calibrate: cross-fitted over 5 folds


def guide_commands() -> list[list[str]]:
    pattern = re.compile(re.escape(MARKER) + r"\s*\n```bash\n(.*?)\n```", re.DOTALL)
    (block,) = pattern.findall("\n".join(path.read_text() for path in MANUAL))
    lines = block.replace("\\\n", " ").splitlines()
    return [argv for argv in (shlex.split(line, comments=True) for line in lines) if argv]


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf-text")
    shutil.copytree(ROOT / "examples" / "hf_gpt2", folder / "examples" / "hf_gpt2")
    commands = guide_commands()
    assert [argv[0] for argv in commands] == ["python", "lmc", "lmc"]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        for argv in commands:
            if argv[0] == "python":
                patch.setattr(sys, "argv", [argv[1], *argv[2:], *SHORT])
                runpy.run_path(argv[1], run_name="__main__")
            else:
                assert main([*argv[1:], "--quiet"]) == 0
    return folder


def test_both_paths_are_measured_on_the_text(example):
    plain = json.loads((example / "out/gpt2-plain/summary.json").read_text())
    aligned = json.loads((example / "out/gpt2-aligned/summary.json").read_text())
    assert plain["align"] == "none" and aligned["align"] == "weight"
    info = aligned["align_info"]
    assert info["objective_after"] >= info["objective_before"]
    assert any(g.endswith(".heads") for g in info["group_sizes"])  # heads are matched whole
    for summary in (plain, aligned):
        assert summary["dataset"] == "corpus.txt"
        assert math.isfinite(summary["calibrated_midpoint_loss_barrier"])
        assert len(summary["loss"]) == len(summary["lambdas"])


def test_the_text_is_read_with_the_models_tokenizer(example):
    from lmc.data import load

    data = load("text", path=str(example / "corpus.txt"), tokenizer=str(example / "gpt2-a"),
                context=64)  # fmt: skip
    assert data.tokenizer.kind == "hf"
    config = json.loads((example / "gpt2-a" / "config.json").read_text())
    assert data.num_classes == config["vocab_size"]


def _make_two():
    return runpy.run_path(str(ROOT / "examples" / "hf_gpt2" / "make_two.py"), run_name="make_two")


def test_either_corpus_gives_the_calibration_enough_windows(monkeypatch, tmp_path):
    """Without the fortunes (their folder hidden) the example writes the Python Language
    Reference, real English text, long enough that the test split of the test's 60,000
    characters holds more windows than the calibration has folds (issue 41: the built-in
    paragraph gave 3)."""
    from lmc.data import load
    from lmc.data import paths as data_paths

    monkeypatch.setattr(data_paths, "DEBIAN_FORTUNES", tmp_path / "no-fortunes")
    make_two = _make_two()
    text, what = make_two["corpus_text"](60_000)
    assert "Python Language Reference" in what and len(text) == 60_000
    assert len(set(text.split())) > 2_000  # prose, not one paragraph repeated
    tokenizer = make_two["train_tokenizer"](text, 512)
    tokenizer.save_pretrained(tmp_path / "tok")
    (tmp_path / "corpus.txt").write_text(text, encoding="utf-8")
    data = load("text", path=str(tmp_path / "corpus.txt"), tokenizer=str(tmp_path / "tok"),
                context=64)  # fmt: skip
    assert len(data.x_test) >= 2 * CALIBRATION_FOLDS
