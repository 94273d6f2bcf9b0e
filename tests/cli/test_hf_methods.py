"""Every alignment method that needs the model's class sees through the wrapper the CLI puts
around ``--hf-model`` (issue 41): ``--align orthogonal``, ``orthogonal-activation`` and
``learned`` on two Hugging Face GPT-2 folders from the command line, and ``--widen`` for two
folders of different widths (``--hf-model-b``, B's architecture). ``--quiet`` silences
transformers' progress bars, and a pair that cannot be widened says why.

The canonical forms compute the models' own functions, so the ends of every aligned path are
the ends of the plain one (each model's own loss on the text).
"""

from __future__ import annotations

import contextlib
import io
import json
import random

import pytest

from lmc.cli.main import main

transformers = pytest.importorskip("transformers")

LETTERS = "abcdefgh "  # 9 characters: the char tokenizer's vocabulary is 10 (with unknown)
FAST = ["--lambdas", "3", "--quiet", "--json", "--device", "cpu", "--align-examples", "64"]


def _gpt2(folder, width: int, heads: int, seed: int):
    import torch

    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=width, n_head=heads, vocab_size=32, n_positions=16,
        attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0,
    )  # fmt: skip
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf-methods")
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        made = {
            "a": _gpt2(root / "a", 16, 2, 0),
            "b": _gpt2(root / "b", 16, 2, 1),
            "wide": _gpt2(root / "wide", 32, 4, 2),
            "many_heads": _gpt2(root / "many_heads", 16, 4, 3),  # head dims 4
            "few_heads": _gpt2(root / "few_heads", 32, 2, 4),  # head dims 16
        }
    finally:
        transformers.logging.set_verbosity(verbosity)
    rng = random.Random(0)
    text = root / "corpus.txt"
    text.write_text("".join(rng.choice(LETTERS) for _ in range(4000)), encoding="utf-8")
    made["data"] = str(text)
    made["root"] = root
    return made


def _interpolate(capsys, folders, a, b, *extra):
    argv = ["interpolate", folders[a], folders[b], "--hf-model", folders[a],
            "--data", folders["data"], *FAST, *extra]  # fmt: skip
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out), captured.err


@pytest.fixture(scope="module")
def own_losses(folders):
    """Each model's own loss on the test windows (the plain path's ends)."""
    out = {}
    for name in ("a", "b", "wide"):
        argv = [
            "interpolate",
            folders[name],
            folders[name],
            "--hf-model",
            folders[name],
            "--data",
            folders["data"],
            *FAST,
            "--out",
            str(folders["root"] / f"own-{name}"),
        ]
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
            assert main(argv) == 0
        out[name] = json.loads(stdout.getvalue())["loss"][0]
    return out


@pytest.mark.parametrize("method", ["orthogonal", "orthogonal-activation", "learned"])
def test_a_canonical_method_aligns_two_hugging_face_gpt2s(method, folders, own_losses, capsys,
                                                          tmp_path):  # fmt: skip
    summary, err = _interpolate(capsys, folders, "a", "b", "--align", method,
                                "--out", str(tmp_path / "out"))  # fmt: skip
    assert summary["align"] == method and summary["hf_model"] == folders["a"]
    assert summary["align_info"]  # the method ran and said what it did
    assert summary["loss"][0] == pytest.approx(own_losses["a"], rel=1e-5)
    assert summary["loss"][-1] == pytest.approx(own_losses["b"], rel=1e-5)
    assert err == ""  # --quiet: no progress bar of transformers either


@pytest.mark.parametrize("order", ["narrow-first", "wide-first"])
def test_two_hugging_face_folders_of_different_widths_are_widened(order, folders, own_losses,
                                                                  capsys, tmp_path):  # fmt: skip
    """``--hf-model-b`` gives B its own architecture; the narrower model is written exactly
    into the wider one's, so the ends are still each model's own loss, whichever comes first."""
    a, b = ("a", "wide") if order == "narrow-first" else ("wide", "a")
    summary, _ = _interpolate(capsys, folders, a, b, "--hf-model-b", folders[b], "--widen",
                              "--align", "orthogonal", "--out", str(tmp_path / "out"))  # fmt: skip
    assert summary["hf_model_b"] == folders[b]
    assert summary["loss"][0] == pytest.approx(own_losses[a], rel=1e-5)
    assert summary["loss"][-1] == pytest.approx(own_losses[b], rel=1e-5)


def test_widening_refusals_say_what_is_wrong(folders, capsys, tmp_path, cli_error):
    common = ["--data", folders["data"], *FAST, "--out", str(tmp_path / "out")]
    # different widths without --widen: the architectures differ
    err = cli_error(["interpolate", folders["a"], folders["wide"], "--hf-model",
                          folders["a"], "--hf-model-b", folders["wide"], *common])  # fmt: skip
    assert "models differ" in err
    err = cli_error(["interpolate", folders["a"], folders["b"], "--hf-model-b",
                          folders["b"], *common])  # fmt: skip
    assert "give --hf-model too" in err
    # the narrower model (stream 16) has more heads (4) than the wider one (2): given in
    # the right order, it must not be told to give the narrower model first
    for first, second in (("many_heads", "few_heads"), ("few_heads", "many_heads")):
        err = cli_error(["interpolate", folders[first], folders[second], "--hf-model",
                              folders[first], "--hf-model-b", folders[second], "--widen",
                              "--align", "orthogonal", *common])  # fmt: skip
        assert "more heads (4)" in err and "(stream width 32, 2 heads)" in err
        assert "give the narrower model first" not in err


def test_quiet_silences_transformers_and_the_bars_show_without_it(folders, capsys, tmp_path):
    argv = ["interpolate", folders["a"], folders["b"], "--hf-model", folders["a"], "--data",
            folders["data"], "--lambdas", "2", "--json", "--device", "cpu"]  # fmt: skip
    assert main([*argv, "--quiet", "--out", str(tmp_path / "q")]) == 0
    assert capsys.readouterr().err == ""
    if not transformers.utils.logging.is_progress_bar_enabled():
        pytest.skip("transformers' progress bars are off in this environment")
    assert main([*argv, "--out", str(tmp_path / "loud")]) == 0
    assert "Loading weights" in capsys.readouterr().err  # what --quiet turned off
