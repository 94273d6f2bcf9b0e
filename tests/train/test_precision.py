"""The ``precision`` training setting: fp32 or bf16 autocast, part of the run's identity."""

import pytest
import torch

from lmc.config import LmcError, config_hash
from lmc.models import build
from lmc.store import RunStore
from lmc.train import PRECISIONS, TrainSettings, fit, make_config, settings_of, train_run


def _model(seed: int = 0) -> torch.nn.Module:
    return build("mlp", input_size=64, width=32, depth=2, seed=seed)


def _bf16_settings(**overrides) -> TrainSettings:
    return TrainSettings(**{"epochs": 3, "lr": 0.1, "precision": "bf16", **overrides})


def test_precision_defaults_to_fp32_and_is_validated():
    assert TrainSettings().precision == "fp32"
    assert PRECISIONS == ("fp32", "bf16")
    with pytest.raises(LmcError, match=r"precision 'fp16'.*fp32, bf16"):
        TrainSettings(precision="fp16")


def test_precision_is_part_of_the_run_identity():
    options = {"width": 32, "depth": 2}
    fp32 = make_config("digits", "mlp", options, epochs=2, precision="fp32")
    bf16 = make_config("digits", "mlp", options, epochs=2, precision="bf16")
    assert fp32["train"]["precision"] == "fp32"
    assert bf16["train"]["precision"] == "bf16"
    assert config_hash(fp32) != config_hash(bf16)
    assert config_hash(fp32) == config_hash(make_config("digits", "mlp", options, epochs=2))
    assert settings_of(bf16).precision == "bf16"
    with pytest.raises(LmcError, match="precision 'int8'"):
        make_config("digits", "mlp", options, precision="int8")


def test_bf16_training_keeps_float32_weights_and_learns(digits):
    model = _model()
    history = fit(model, digits, _bf16_settings())
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert history[-1]["test_accuracy"] > 0.85
    # the model is left without autocast: its plain forward pass is float32
    assert model(digits.x_test[:4]).dtype == torch.float32


def test_bf16_changes_the_weights_but_is_deterministic_on_cpu(digits):
    def weights(precision: str) -> dict[str, torch.Tensor]:
        model = _model()
        fit(model, digits, _bf16_settings(epochs=2, precision=precision))
        return model.state_dict()

    first, second, fp32 = weights("bf16"), weights("bf16"), weights("fp32")
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert any(not torch.equal(first[k], fp32[k]) for k in first)


def test_bf16_run_trains_into_the_store(tmp_path, digits):
    config = make_config(
        "digits", "mlp", {"width": 32, "depth": 2}, epochs=2, lr=0.1, precision="bf16"
    )
    run, reused = train_run(config, store=RunStore(tmp_path), data=digits)
    assert not reused
    assert run.config["train"]["precision"] == "bf16"
    assert all(t.dtype == torch.float32 for t in run.state_dict().values())
