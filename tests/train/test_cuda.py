"""A training step on CUDA (marked ``gpu``; skipped without CUDA): the same first step as on
the CPU, up to float rounding."""

from __future__ import annotations

import pytest
import torch

from lmc.data import Dataset
from lmc.models import build
from lmc.train import TrainSettings, fit

pytestmark = pytest.mark.gpu  # skipped without CUDA (tests/conftest.py)


def test_a_training_step_on_cuda_matches_the_cpu():
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 20, generator=gen), torch.randint(0, 5, (64,), generator=gen)
    data = Dataset("random", x, y, x[:8], y[:8], 5, (20,), (0.0,), (1.0,), False)
    settings = TrainSettings(epochs=1, batch_size=32, lr=0.1, init_seed=0, data_seed=0)
    states, losses = {}, {}
    for device in ("cpu", "cuda"):
        model = build("mlp", input_size=20, width=16, num_classes=5, seed=0)
        history = fit(model, data, settings, device=device, evaluate_test=False)
        assert next(model.parameters()).device.type == device
        states[device] = {k: v.cpu() for k, v in model.state_dict().items()}
        losses[device] = history[0]["train_loss"]
    assert losses["cuda"] == pytest.approx(losses["cpu"], rel=1e-4)
    for k, v in states["cpu"].items():
        assert torch.allclose(states["cuda"][k], v, atol=1e-5), k
