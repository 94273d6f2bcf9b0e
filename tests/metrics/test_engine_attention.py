"""Path evaluation of attention models on the CPU: ``auto`` takes the loop, where ``torch.vmap``
has no batching rule for ``scaled_dot_product_attention`` (benchmarks/attention_path_eval.py),
and gives the same numbers as the batched engine."""

from __future__ import annotations

import copy

import pytest
import torch

import lmc.models
from lmc.metrics import evaluate_path
from lmc.metrics.engine import BatchedEngine, LoopEngine, select_engine


def _gpts():
    options = dict(vocab=7, context=5, width=8, depth=1, heads=2)
    return [lmc.models.build("gpt", seed=s, **options).eval() for s in (1, 2)]


def _engine(method, model, a, b, x):
    return select_engine(method, bn_mode="none", model=copy.deepcopy(model),
                         state_a=a.state_dict(), state_b=b.state_dict(), x=x,
                         device=torch.device("cpu"))  # fmt: skip


def test_auto_takes_the_loop_for_attention_on_the_cpu_and_batched_still_runs():
    a, b = _gpts()
    x = torch.randint(0, 7, (6, 5), generator=torch.Generator().manual_seed(0))
    assert isinstance(_engine("auto", a, a, b, x), LoopEngine)
    assert isinstance(_engine("batched", a, a, b, x), BatchedEngine)
    mlp = lmc.models.build("mlp", seed=0, input_size=4, width=8, depth=1, num_classes=3)
    assert isinstance(_engine("auto", mlp, mlp, mlp, torch.randn(6, 4)), BatchedEngine)


def test_auto_and_batched_give_the_same_path():
    a, b = _gpts()
    x = torch.randint(0, 7, (6, 5), generator=torch.Generator().manual_seed(0))
    y = torch.roll(x, -1, dims=1)
    auto = evaluate_path(a, b, x, y, 5, task="next-token")
    batched = evaluate_path(a, b, x, y, 5, task="next-token", method="batched")
    assert auto.loss == pytest.approx(batched.loss, abs=1e-5)
    assert auto.accuracy == pytest.approx(batched.accuracy, abs=1e-9)
