"""The merge tests share the metrics tests' digits tensors and small trained MLPs
(``tests/metrics/conftest.py``, loaded here by path: both folders' conftests are modules named
``conftest``), and ``random_state``, small state dicts with a BatchNorm buffer."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from lmc.data import load

_PATH = Path(__file__).resolve().parents[1] / "metrics" / "conftest.py"
_SPEC = importlib.util.spec_from_file_location("lmc_tests_metrics_fixtures", _PATH)
_FIXTURES = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_FIXTURES)

digits = _FIXTURES.digits
mlp_pair = _FIXTURES.mlp_pair
bn_pair = _FIXTURES.bn_pair


@pytest.fixture(scope="session")
def digits_dataset():
    """sklearn's digits as an lmc Dataset (the top-level ``digits`` fixture, which this folder's
    ``digits``, the standardised tensors, hides)."""
    return load("digits")


def _random_state(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "w": torch.randn(4, 3, generator=g),
        "b": torch.randn(4, generator=g),
        "bn.running_mean": torch.randn(4, generator=g),
        "bn.num_batches_tracked": torch.tensor(seed + 10),
    }


@pytest.fixture(scope="session")
def random_state():
    """``random_state(seed)``: a state dict of normal draws from ``seed`` (``w`` (4, 3), ``b``
    (4,), ``bn.running_mean`` (4,)) with the integer buffer ``bn.num_batches_tracked`` =
    ``seed + 10``."""
    return _random_state
