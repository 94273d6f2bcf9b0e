"""The merge tests share the metrics tests' digits tensors and small trained MLPs
(``tests/metrics/conftest.py``, loaded here by path: both folders' conftests are modules named
``conftest``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

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
