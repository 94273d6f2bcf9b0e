"""The README's Hugging Face language-model example (``<!-- test: hf-text -->``) runs as written
(issue 29): two GPT-2 ``save_pretrained`` folders with their tokenizer, a text file, and
``lmc interpolate --hf-model FOLDER --data corpus.txt`` without and with weight matching.

The only change to the README's lines: the example script trains for 5 steps on 20,000
characters (``--steps 5 --chars 20000``) instead of its defaults, to keep the test short.
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
SHORT = ["--steps", "5", "--chars", "20000"]


def readme_commands() -> list[list[str]]:
    pattern = re.compile(re.escape(MARKER) + r"\s*\n```bash\n(.*?)\n```", re.DOTALL)
    (block,) = pattern.findall((ROOT / "README.md").read_text())
    lines = block.replace("\\\n", " ").splitlines()
    return [argv for argv in (shlex.split(line, comments=True) for line in lines) if argv]


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf-text")
    shutil.copytree(ROOT / "examples" / "hf_gpt2", folder / "examples" / "hf_gpt2")
    commands = readme_commands()
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
