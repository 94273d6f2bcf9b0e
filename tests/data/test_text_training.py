"""``lmc train --model gpt --data corpus.txt``: a GPT trained on a text file like any other run
(issue 29): its config names the text options in full, its tokenizer is saved beside it, an
identical run is reused, and bad text files are one-line errors that leave nothing behind."""

from __future__ import annotations

import hashlib
import json

import pytest

from lmc.cli.main import main
from lmc.store import load_run
from lmc.train.runs import TOKENIZER_FILE, make_config

GPT = ["--model", "gpt", "--width", "16", "--depth", "1", "--heads", "2", "--context", "16"]
FAST = ["--epochs", "1", "--optimizer", "adam", "--lr", "1e-3", "--quiet"]


@pytest.fixture()
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("It was the best of times, it was the worst of times. " * 120, "utf-8")
    return path


def test_a_gpt_trains_on_a_text_file_and_is_reused(corpus, tmp_path, capsys):
    runs = tmp_path / "runs"
    argv = ["train", *GPT, "--data", str(corpus), *FAST, "--runs-dir", str(runs)]
    assert main(argv) == 0
    run_dir = capsys.readouterr().out.strip().splitlines()[-1]
    run = load_run(run_dir)
    assert run.config["dataset"] == "text" and run.config["model"] == "gpt"
    options = run.config["dataset_options"]
    assert options == {
        "path": str(corpus),
        "sha256": hashlib.sha256(corpus.read_bytes()).hexdigest(),
        "tokenizer": "char",
        "context": 16,
        "stride": 16,
        "splits": [0.9, 0.05, 0.05],
    }
    vocab = len(set(corpus.read_text()[: int(0.9 * len(corpus.read_text()))]))
    assert run.config["model_options"]["context"] == 16
    assert run.config["model_options"]["vocab"] == vocab + 1  # + the unknown-character id
    tokenizer = json.loads((run.path / TOKENIZER_FILE).read_text())
    assert tokenizer["kind"] == "char"
    assert run.metrics["final_test_loss"] > 0
    assert main(argv) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == run_dir
    assert len(list(runs.iterdir())) == 1


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "is empty"),
        (bytes(range(128, 256)) * 20, "is not UTF-8 text"),
        (b"tiny", "fewer than one window needs"),
    ],
)
def test_a_bad_text_file_is_one_line_and_writes_nothing(content, message, tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(content)
    runs = tmp_path / "runs"
    assert main(["train", *GPT, "--data", str(bad), *FAST, "--runs-dir", str(runs)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not runs.exists() or not any(runs.iterdir())


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "mlp", "--data", "CORPUS"], "this model classifies"),
        (["--model", "mlp", "--context", "8"], "--context is for text data"),
        (["--model", "gpt", "--dataset", "mnist", "--data", "CORPUS"], "drop --dataset mnist"),
        (["--model", "gpt"], "gpt: this model predicts at every position"),
    ],
)
def test_text_and_model_mismatches_are_refused(argv, message, corpus, tmp_path, capsys):
    argv = [str(corpus) if a == "CORPUS" else a for a in argv]
    assert main(["train", *argv, *FAST, "--runs-dir", str(tmp_path / "runs")]) == 2
    assert message in capsys.readouterr().err


def test_make_config_records_the_text_options_in_full(corpus):
    config = make_config("text", "gpt", {"width": 16, "depth": 1, "heads": 2},
                         {"path": str(corpus), "context": 8, "stride": 4})  # fmt: skip
    assert config["dataset_options"]["stride"] == 4
    assert config["dataset_options"]["tokenizer"] == "char"
    assert config["model_options"]["context"] == 8
    # a classification dataset's options are recorded as given (earlier runs keep their ids)
    assert make_config("digits", "mlp", {"width": 8})["dataset_options"] == {}


def test_the_pair_verbs_run_on_two_text_runs(corpus, tmp_path, capsys):
    """lmc align, and lmc interpolate aligned by weight matching and by STE on the next-token
    loss, on two GPTs trained on the same text file."""
    runs = tmp_path / "runs"
    dirs = []
    for seed in ("1", "2"):
        argv = ["train", *GPT, "--data", str(corpus), *FAST, "--seed", seed]
        assert main([*argv, "--runs-dir", str(runs)]) == 0
        dirs.append(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(["align", *dirs, "--runs-dir", str(runs), "--quiet"]) == 0
    aligned = load_run(capsys.readouterr().out.strip().splitlines()[-1])
    assert aligned.config["dataset"] == "text"
    for method in (["--align", "weight"], ["--align", "ste", "--ste-steps", "3"]):
        out = tmp_path / method[1]
        argv = ["interpolate", *dirs, *method, "--lambdas", "3", "--out", str(out), "--quiet"]
        assert main(argv) == 0, capsys.readouterr().err
        summary = json.loads((out / "summary.json").read_text())
        assert summary["align"] == summary["align_info"]["method"] == method[1]
        if method[1] == "weight":  # weight matching never lowers its objective
            info = summary["align_info"]
            assert info["objective_after"] >= info["objective_before"]
