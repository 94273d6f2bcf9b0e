"""`lmc train` against a sweep, and batch sizes above the training split.

Threads: on CPU the PyTorch thread count changes how matrix products and reductions are split,
so float rounding, and after a few steps the weights, differ between thread counts (a width-16
MLP with LayerNorm on digits differs in every tensor after one epoch between 1 and 2 threads).
Both entry points must train with the one count of lmc.train.runs.DEFAULT_THREADS, so the run
a later study reuses has the same bits whichever command made it.
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from lmc.cli.main import main
from lmc.models import build
from lmc.store import load_run
from lmc.train.runs import DEFAULT_THREADS

MODEL = ["--dataset", "digits", "--model", "mlp", "--width", "16", "--depth", "1",
         "--norm", "layer", "--epochs", "1"]  # fmt: skip


@pytest.fixture
def many_threads():
    """The process at 2 PyTorch threads (a machine's default is its core count), restored."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield 2
    torch.set_num_threads(before)


def _run(argv: list[str]) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return main(argv)


def test_train_and_sweep_give_the_same_bits(many_threads, tmp_path, capsys, tiny_study, study_toml):
    trained, swept = tmp_path / "trained", tmp_path / "swept"
    assert _run(["train", *MODEL, "--seed", "0", "--runs-dir", str(trained), "--quiet"]) == 0
    assert torch.get_num_threads() == many_threads  # the caller's count is restored
    (run_dir,) = [p for p in trained.iterdir() if not p.name.startswith(".")]
    study = tmp_path / "entry.toml"
    raw = tiny_study("entry", model={"norm": "layer"}, sweep={"widths": [16]})
    study.write_text(study_toml(raw))  # MODEL's configuration
    argv = ["sweep", str(study), "--out", str(tmp_path / "out"), "--runs-dir", str(swept),
            "--workers", "1", "--no-report", "--quiet"]  # fmt: skip
    assert _run(argv) == 0, capsys.readouterr().err
    assert torch.get_num_threads() == many_threads
    # the sweep's model A (seed 0) is this config: one run identity, one folder name
    assert (swept / run_dir.name).is_dir()
    a, b = load_run(run_dir), load_run(swept / run_dir.name)
    assert a.config == b.config
    threads = {r.metrics["environment"]["torch_threads"] for r in (a, b)}
    assert threads == {DEFAULT_THREADS}  # both trained with the one setting
    state_a, state_b = a.state_dict(), b.state_dict()
    assert state_a.keys() == state_b.keys()
    different = [k for k in state_a if not torch.equal(state_a[k], state_b[k])]
    assert different == []


def test_train_threads_option(many_threads, tmp_path):
    runs = tmp_path / "runs"
    argv = ["train", *MODEL, "--runs-dir", str(runs), "--quiet", "--threads", "3", "--json"]
    assert _run(argv) == 0
    (run_dir,) = list(runs.iterdir())
    assert load_run(run_dir).metrics["environment"]["torch_threads"] == 3
    assert torch.get_num_threads() == many_threads


def test_train_threads_must_be_positive(tmp_path, capsys):
    assert main(["train", *MODEL, "--runs-dir", str(tmp_path), "--threads", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "threads" in err
    assert list(tmp_path.iterdir()) == []


def test_batch_size_above_the_split_is_one_full_batch_step(tmp_path, capsys):
    """Each epoch is then one step on all N examples: the same weights as --batch-size N
    (one batch of the same shuffled N), under its own config; a note on stderr says so."""
    small = ["--dataset", "digits", "--model", "mlp", "--width", "8", "--epochs", "2",
             "--train-size", "64"]  # fmt: skip
    runs = tmp_path / "runs"
    assert _run(["train", *small, "--batch-size", "1000", "--runs-dir", str(runs), "--json"]) == 0
    captured = capsys.readouterr()
    big = json.loads(captured.out)
    notes = [line for line in captured.err.splitlines() if "note:" in line]
    assert len(notes) == 1, captured.err
    assert "--batch-size 1000" in notes[0] and "64 training examples" in notes[0]
    assert "one full-batch step" in notes[0]
    assert _run(["train", *small, "--batch-size", "64", "--runs-dir", str(runs), "--json"]) == 0
    captured = capsys.readouterr()
    full = json.loads(captured.out)
    assert "note:" not in captured.err
    assert big["run_dir"] != full["run_dir"]
    state_big = load_run(big["run_dir"]).state_dict()
    state_full = load_run(full["run_dir"]).state_dict()
    config = load_run(full["run_dir"]).config
    init = build(config["model"], seed=0, **config["model_options"]).state_dict()
    for key in state_full:
        assert torch.equal(state_big[key], state_full[key]), key
    assert any(not torch.equal(state_full[k], init[k]) for k in state_full)  # it did train


def test_batch_size_help_says_what_a_large_one_does(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "a batch size above N is one full-batch step per epoch" in text
    assert "last partial batch dropped" in text
