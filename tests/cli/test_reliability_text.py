"""Text runs that name their data in full (issue 41): a tokenizer folder's content is part of a
run's identity, as a text file's SHA-256 is, and a changed tokenizer is refused when a stored
run is evaluated; paths given relative are read where the run was trained, so a run is
evaluated from any folder (its config keeps them as given: run ids are unchanged); a tokenizer
folder that holds no tokenizer says so in a whole sentence."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from lmc.cli.main import main
from lmc.data import dataset_options
from lmc.store import load_run

GPT = ["--model", "gpt", "--width", "16", "--depth", "1", "--heads", "2", "--context", "16"]
FAST = ["--epochs", "1", "--optimizer", "adam", "--lr", "1e-3", "--quiet", "--json"]
TEXT = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was "
    "the age of foolishness, it was the epoch of belief, it was the epoch of incredulity. "
) * 40


def _bpe_folder(folder, text: str, vocab: int = 60) -> str:
    """A byte-level BPE tokenizer trained on ``text``, saved as a Hugging Face folder."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab, initial_alphabet=sorted(set(text)),
                                  show_progress=False)  # fmt: skip
    raw.train_from_iterator([text], trainer)
    transformers.PreTrainedTokenizerFast(tokenizer_object=raw).save_pretrained(str(folder))
    return str(folder)


def _train(capsys, *argv) -> dict:
    assert main(["train", *GPT, *FAST, *argv]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_a_tokenizer_folder_is_part_of_the_runs_identity(tmp_path, capsys, monkeypatch, cli_error):
    """Replacing ``tok/`` by another tokenizer of the same vocabulary size (other merges, so
    other ids) makes ``lmc train`` train anew instead of reusing the run, and makes
    ``lmc interpolate`` refuse the runs trained with the first one."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.txt").write_text(TEXT, encoding="utf-8")
    _bpe_folder(tmp_path / "tok", TEXT)
    runs = str(tmp_path / "runs")
    common = ["--data", "corpus.txt", "--tokenizer", "tok", "--runs-dir", runs]
    first = [_train(capsys, *common, "--seed", str(seed)) for seed in (1, 2)]
    options = first[0]["config"]["dataset_options"]
    assert options["tokenizer"] == "tok" and len(options["tokenizer_sha256"]) == 64
    assert _train(capsys, *common, "--seed", "1")["reused"] is True  # unchanged: reused

    other = tmp_path / "other"
    _bpe_folder(other, TEXT[::-1])  # the same alphabet and size, other merges
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / "tok" / name).write_bytes((other / name).read_bytes())
    again = _train(capsys, *common, "--seed", "1")
    assert again["reused"] is False and again["run_dir"] != first[0]["run_dir"]
    changed = again["config"]["dataset_options"]["tokenizer_sha256"]
    assert changed != options["tokenizer_sha256"]

    err = cli_error(["interpolate", first[0]["run_dir"], first[1]["run_dir"],
                          "--device", "cpu", "--quiet", "--out", str(tmp_path / "o")])  # fmt: skip
    assert "tokenizer folder tok has changed since it was recorded" in err
    assert not (tmp_path / "o").exists()


def test_runs_without_a_tokenizer_folder_keep_their_identity(tmp_path):
    """Only a folder adds ``tokenizer_sha256``: a char or bytes text run's options (and so
    its run id) are what they were before issue 41."""
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT, encoding="utf-8")
    for tokenizer in ("char", "bytes"):
        options = dataset_options("text", {"path": str(path), "tokenizer": tokenizer})
        assert sorted(options) == ["context", "path", "sha256", "splits", "stride", "tokenizer"]
    assert dataset_options("digits", {}) == {}
    with pytest.raises(Exception, match="tokenizer 'char' has none"):
        dataset_options("text", {"path": str(path), "tokenizer_sha256": "0" * 64})


def test_a_run_trained_with_relative_paths_is_evaluated_from_another_folder(
    tmp_path, capsys, monkeypatch, cli_error
):
    """The config keeps ``corpus.txt`` and ``tok`` as given (its identity); the run records
    where they were (``data_paths``), so the pair is read from there wherever the verb runs,
    even beside another ``corpus.txt``; a moved project reads them as given again."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "corpus.txt").write_text(TEXT, encoding="utf-8")
    _bpe_folder(project / "tok", TEXT)
    monkeypatch.chdir(project)
    runs = str(tmp_path / "runs")
    common = ["--data", "corpus.txt", "--tokenizer", "tok", "--runs-dir", runs]
    trained = [_train(capsys, *common, "--seed", str(seed)) for seed in (1, 2)]
    run = load_run(trained[0]["run_dir"])
    assert run.config["dataset_options"]["path"] == "corpus.txt"
    assert run.metrics["data_paths"] == {"path": str(project / "corpus.txt"),
                                         "tokenizer": str(project / "tok")}  # fmt: skip
    digest = hashlib.sha256((project / "corpus.txt").read_bytes()).hexdigest()
    assert run.config["dataset_options"]["sha256"] == digest

    def interpolate(out):
        argv = ["interpolate", trained[0]["run_dir"], trained[1]["run_dir"], "--device", "cpu",
                "--quiet", "--json", "--lambdas", "2", "--out", str(out)]  # fmt: skip
        assert main(argv) == 0, capsys.readouterr().err
        return json.loads(capsys.readouterr().out)

    here = interpolate(tmp_path / "here")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "corpus.txt").write_text("another text altogether. " * 200, encoding="utf-8")
    monkeypatch.chdir(elsewhere)
    there = interpolate(tmp_path / "there")
    assert there["loss"] == here["loss"]
    assert there["loss"][0] == pytest.approx(trained[0]["final_test_loss"], rel=1e-5)

    moved = tmp_path / "moved"
    project.rename(moved)
    monkeypatch.chdir(moved)  # the recorded paths are gone: as given, from here
    assert interpolate(tmp_path / "moved-out")["loss"] == here["loss"]
    monkeypatch.chdir(elsewhere)  # neither: what is read is not the run's, and it says so
    argv = ["interpolate", trained[0]["run_dir"], trained[1]["run_dir"], "--device", "cpu",
            "--quiet", "--out", str(tmp_path / "x")]  # fmt: skip
    assert "tokenizer 'tok' is not 'char', 'bytes' or a folder" in cli_error(argv)
    shutil.copytree(moved / "tok", elsewhere / "tok")
    assert "corpus.txt has changed since it was recorded" in cli_error(argv)


def test_a_folder_without_a_tokenizer_is_one_whole_sentence(tmp_path, capsys, cli_error):
    (tmp_path / "corpus.txt").write_text(TEXT, encoding="utf-8")
    empty = tmp_path / "empty"
    empty.mkdir()
    argv = ["train", *GPT, *FAST, "--data", str(tmp_path / "corpus.txt"),
            "--runs-dir", str(tmp_path / "runs")]  # fmt: skip
    err = cli_error([*argv, "--tokenizer", str(empty)])
    assert f"tokenizer folder {empty} holds no tokenizer files" in err
    assert not err.endswith(":") and not err.endswith("one of:")
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("not a tokenizer")
    err = cli_error([*argv, "--tokenizer", str(junk)])
    assert f"tokenizer folder {junk} does not load" in err
    assert not err.rstrip().endswith(":")  # the library's list is kept, not cut off
