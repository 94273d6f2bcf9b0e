"""The guide's "from Python" section (docs/guide.md) runs as written: every fenced python block
marked ``<!-- test: python-api -->`` is executed, in order, in one namespace (a BatchNorm CNN on
digits, trained two epochs), and what it claims is checked on what it made; the README's marked
block then runs on the models the guide made."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import matplotlib
import pytest
import torch
from matplotlib.axes import Axes

from lmc.config import LmcError

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "guide.md"
SECTION = "## The same from Python, on your own model"
MARKER = "<!-- test: python-api -->"


def section_text() -> str:
    text = GUIDE.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start)
    return text[start : end if end != -1 else len(text)]


def marked_blocks(text: str) -> list[str]:
    """The fenced python blocks right after a marker line (blank lines between allowed; a block
    indented in a list item is dedented)."""
    pattern = re.compile(
        re.escape(MARKER) + r"\s*\n(?P<indent>[ \t]*)```python\n(?P<body>.*?)\n(?P=indent)```",
        re.DOTALL,
    )
    return [textwrap.dedent(m["body"]) for m in pattern.finditer(text)]


def test_every_python_block_of_the_section_is_marked():
    text = section_text()
    fenced = re.findall(r"```python\n", text)
    assert len(marked_blocks(text)) == len(fenced) >= 3


def test_marker_extraction_skips_unmarked_blocks():
    text = (
        f"{MARKER}\n```python\nx = 1\n```\n\n```python\ny = 2\n```\n{MARKER}\n\n```python\nz\n```"
    )
    assert marked_blocks(text) == ["x = 1", "z"]
    indented = f"- an item:\n\n  {MARKER}\n  ```python\n  if a:\n      b = 1\n  ```\n"
    assert marked_blocks(indented) == ["if a:\n    b = 1"]


@pytest.fixture(scope="module")
def namespace(tmp_path_factory):
    """Run the section's blocks as written, in a fresh folder (they write out/pair)."""
    import os

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cwd = os.getcwd()
    folder = tmp_path_factory.mktemp("readme")
    os.chdir(folder)
    ns: dict = {"__name__": "__readme__"}
    try:
        for block in marked_blocks(section_text()):
            exec(compile(block, str(GUIDE), "exec"), ns)
    finally:
        os.chdir(cwd)
    ns["__folder__"] = folder
    yield ns
    plt.close("all")


def test_the_python_api_example_runs_on_a_batchnorm_model(namespace):
    model_a = namespace["model_a"]
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in model_a.modules())
    path = namespace["path"]
    assert path.bn == "reset"  # bn="auto" on a BatchNorm model: recomputed on bn_inputs
    assert len(path.lambdas) == 11 and path.lambdas[0] == 0.0 and path.lambdas[-1] == 1.0
    assert path.calibrate and path.calibrated_loss is not None
    # the records of layerwise: one per probe point at λ = ½
    assert namespace["records"] and all(r["lam"] == 0.5 for r in namespace["records"])
    # the pair block wrote its folder
    out = namespace["__folder__"] / "out" / "pair"
    for name in ("curve.csv", "summary.json", "path.png", "layers.csv"):
        assert (out / name).is_file(), name


def test_the_notebook_example_draws_and_tabulates(namespace):
    path = namespace["path"]
    ax_loss, ax_acc = namespace["ax_loss"], namespace["ax_acc"]
    assert isinstance(ax_loss, Axes) and isinstance(ax_acc, Axes)
    assert [line.get_label() for line in ax_loss.get_lines()] == ["loss", "calibrated loss"]
    assert [line.get_label() for line in ax_acc.get_lines()] == [
        "accuracy",
        "ensemble accuracy",
    ]
    curve = namespace["curve"]
    assert list(curve["lambda"]) == path.lambdas
    assert list(curve["accuracy"]) == path.accuracy
    layers = namespace["layers"]
    assert len(layers) == len(namespace["result"].analysis.records)


def test_without_bn_inputs_a_batchnorm_model_is_an_error_naming_them(namespace):
    """What the guide says: bn_inputs is needed for a BatchNorm model (bn='auto')."""
    import lmc.metrics

    ns = namespace
    with pytest.raises(LmcError, match="bn_inputs"):
        lmc.metrics.evaluate_path(ns["model_a"], ns["model_b"], ns["x_test"], ns["y_test"], 3)
    no_reset = lmc.metrics.evaluate_path(
        ns["model_a"], ns["model_b"], ns["x_test"], ns["y_test"], 3, bn="none"
    )
    assert no_reset.bn == "none"


def test_the_readme_example_runs_on_the_guides_models(namespace, tmp_path, monkeypatch):
    """The README's marked block (``model_a``, ``model_b`` and ``data`` from the guide)."""
    (block,) = marked_blocks(README.read_text())
    monkeypatch.chdir(tmp_path)
    ns = dict(namespace)
    exec(compile(block, str(README), "exec"), ns)
    assert ns["result"].path.lambdas[0] == 0.0 and ns["result"].path.calibrate
    assert (tmp_path / "out" / "pair" / "summary.json").is_file()
