"""Path evaluation on CUDA (marked ``gpu``; skipped without CUDA): the same losses and
accuracies as on the CPU, up to float rounding."""

from __future__ import annotations

import pytest
import torch

from lmc.metrics import evaluate_path
from lmc.models import build

pytestmark = pytest.mark.gpu  # skipped without CUDA (tests/conftest.py)


def test_a_path_on_cuda_matches_the_cpu():
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(128, 20, generator=gen), torch.randint(0, 5, (128,), generator=gen)
    paths = {}
    for device in ("cpu", "cuda"):
        a = build("mlp", input_size=20, width=16, num_classes=5, seed=1).to(device)
        b = build("mlp", input_size=20, width=16, num_classes=5, seed=2).to(device)
        paths[device] = evaluate_path(a, b, x.to(device), y.to(device), 5)
    cpu, gpu = paths["cpu"], paths["cuda"]
    assert [float(v) for v in gpu.loss] == pytest.approx([float(v) for v in cpu.loss], rel=1e-4)
    assert [float(v) for v in gpu.accuracy] == pytest.approx(
        [float(v) for v in cpu.accuracy], abs=1.5 / 128
    )
