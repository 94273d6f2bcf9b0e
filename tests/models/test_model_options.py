"""A model option is declared once, in its model's module: ``lmc train`` gets its flag and help
from the declaration, and which models take it is read off the registry."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from lmc.cli.main import main
from lmc.models import MODELS, vector_inputs
from lmc.models.options import ModelOption
from lmc.models.registry import flag_options, register_model
from lmc.perm.widen import WIDENABLE_MODELS, widenable_models


class ToyNet(nn.Module):
    """Flatten -> Linear, its logits multiplied by ``toy_gain``."""

    def __init__(self, *, input_size, num_classes=10, width=4, toy_gain=1.0):
        super().__init__()
        self.toy_gain = toy_gain
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(input_size, width)
        self.out = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.fc1(self.flatten(x)))) * self.toy_gain


@pytest.fixture
def toy():
    """A toy model with one option of its own, registered for one test (the whole change
    that adds an option: its declaration in the model's own registration)."""
    made = []

    @register_model(
        "toy",
        width="units",
        default_width=4,
        inputs=vector_inputs,
        options={"toy_gain": ModelOption(1.0, "factor on the logits")},
        description="a toy model for the option test",
        widenable=True,
    )
    def toy_factory(**options):
        made.append(dict(options))
        return ToyNet(**options)

    try:
        yield made
    finally:
        MODELS.pop("toy", None)


def _help(argv, capsys) -> str:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_a_declared_option_is_a_train_flag_with_its_help(toy, capsys):
    text = _help(["train", "--help"], capsys)
    assert "--toy-gain TOY_GAIN toy: factor on the logits (default 1)" in text
    # the model's own help shows its options alone
    own = _help(["train", "--model", "toy", "--help"], capsys)
    section = own.split("options of model toy", 1)[1].split("training recipe", 1)[0]
    assert "--toy-gain TOY_GAIN factor on the logits (default 1)" in section
    assert "--depth" not in section and "--heads" not in section


def test_the_flag_reaches_the_model_and_the_config(toy, tmp_path, capsys):
    argv = ["train", "--model", "toy", "--toy-gain", "2.5", "--epochs", "1", "--quiet"]
    assert main([*argv, "--runs-dir", str(tmp_path), "--json"]) == 0
    reply = json.loads(capsys.readouterr().out)
    assert reply["config"]["model_options"]["toy_gain"] == 2.5
    assert any(options.get("toy_gain") == 2.5 for options in toy)


def test_another_models_flag_is_refused_and_the_option_is_not_anothers(toy, tmp_path, capsys):
    assert main(["train", "--model", "toy", "--depth", "2", "--runs-dir", str(tmp_path)]) == 2
    assert "--depth is not an option of toy" in capsys.readouterr().err
    assert main(["train", "--model", "mlp", "--toy-gain", "2", "--runs-dir", str(tmp_path)]) == 2
    assert "--toy-gain is not an option of mlp" in capsys.readouterr().err


def test_which_models_take_an_option_is_derived(toy):
    takers = flag_options()
    assert [m for m, _ in takers["toy_gain"]] == ["toy"]
    assert {m for m, _ in takers["depth"]} == {"mlp", "vit", "gpt", "llama"}
    assert {m for m, _ in takers["bias"]} == {"mlp", "vgg11", "vgg16", "resnet20", "vit", "gpt"}


def test_widenable_is_a_field_of_the_entry(toy):
    assert "toy" in widenable_models()
    assert MODELS["gpt"].widenable and MODELS["vit"].widenable and not MODELS["mlp"].widenable
    MODELS.pop("toy")
    assert widenable_models() == ("gpt", "vit") == WIDENABLE_MODELS


def test_one_option_name_has_one_type_and_flag():
    with pytest.raises(ValueError, match="one name, one flag"):
        register_model(
            "clash", width="units", default_width=4, inputs=vector_inputs,
            options={"depth": ModelOption("deep", "a word")},
        )  # fmt: skip
    assert "clash" not in MODELS


def test_a_declared_choice_is_checked_in_every_config():
    from lmc.config import LmcError
    from lmc.models import resolve_options

    with pytest.raises(LmcError, match="pool must be one of cls, mean"):
        resolve_options("vit", {"pool": "max"}, input_shape=(1, 8, 8), num_classes=10)
    with pytest.raises(LmcError, match="tied must be true or false"):
        resolve_options("llama", {"tied": "yes", "vocab": 5, "context": 4})
