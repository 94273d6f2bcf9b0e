"""A dataset's task is read from its own declaration without loading any file
(:func:`lmc.data.loaders.dataset_task`), and the study checks ask it, not the name."""

from __future__ import annotations

import pytest

from lmc.config import LmcError
from lmc.data import ALL_DATASETS, TEXT_DATASETS, load
from lmc.data.loaders import dataset_task
from lmc.experiments import kind_settings
from lmc.models import get_model


def test_every_dataset_declares_its_task_without_files(monkeypatch):
    monkeypatch.setenv("LMC_DATA", "/nonexistent")
    for name in ALL_DATASETS:  # mnist, cifar and fortunes need files: none is read
        assert dataset_task(name) == ("next-token" if name in TEXT_DATASETS else "classification")
    assert dataset_task("FMNIST") == "classification"  # names as load takes them
    assert dataset_task("Shakespeare") == "next-token"


def test_the_declaration_is_the_loaded_datasets_task(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    loaded = [load("digits"), load("synthetic", train_size=64, test_size=32),
              load("text", path=str(corpus), context=8)]  # fmt: skip
    for data, name in zip(loaded, ("digits", "synthetic", "text")):
        assert dataset_task(name) == data.task


def test_study_checks_ask_the_declaration(monkeypatch):
    gpt, mlp = get_model("gpt"), get_model("mlp")
    assert kind_settings.data_given(gpt, {"dataset": "fortunes"}) == {"context": 128, "vocab": 10}
    assert kind_settings.data_given(mlp, {"dataset": "fortunes"}) == {}  # refused: no options
    assert kind_settings.data_given(mlp, {"dataset": "digits"}) == {"input_size": 64}
    # the declaration decides, not the name: declared next-token, digits serves a gpt
    monkeypatch.setattr(kind_settings, "dataset_task", lambda name: "next-token")
    assert kind_settings.data_given(gpt, {"dataset": "digits"}) == {}  # (1, 8, 8): not windows
    assert kind_settings.data_given(mlp, {"dataset": "digits"}) == {}


def test_an_unknown_dataset_is_refused():
    with pytest.raises(LmcError, match="unknown dataset 'no-such-data'"):
        dataset_task("no-such-data")
