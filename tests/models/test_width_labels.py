"""What ``width`` means is written once, in each model's registry entry, and ``--help`` reads it."""

from __future__ import annotations

import argparse

import pytest

from lmc.cli.train import add_arguments
from lmc.models import MODELS
from lmc.models.registry import DEFAULT_WIDTH_LABELS, width_summary


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("mlp", "hidden units per layer"),
        ("vgg11", "channel multiplier"),
        ("vgg16", "channel multiplier"),
        ("resnet20", "channel multiplier"),
        ("vit", "embedding dimension"),
        ("gpt", "embedding dimension"),
    ],
)
def test_each_zoo_model_says_what_its_width_counts(name, label):
    entry = MODELS[name]
    assert entry.width_label == label
    assert entry.width_help.startswith(label)


def test_every_entry_has_a_label_and_kinds_give_the_default():
    assert set(DEFAULT_WIDTH_LABELS) == {"units", "multiplier"}
    for entry in MODELS.values():
        assert entry.width_label
    assert MODELS["mlp"].width_label == DEFAULT_WIDTH_LABELS["units"]
    assert MODELS["vit"].width_label != DEFAULT_WIDTH_LABELS[MODELS["vit"].width]


def test_train_help_for_width_is_the_registry_summary():
    text = width_summary()
    for name, entry in MODELS.items():
        assert name in text and entry.width_help in text
        assert f"default {entry.default_width:g}" in text
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    (action,) = [a for a in parser._actions if "--width" in a.option_strings]
    assert action.help == text
