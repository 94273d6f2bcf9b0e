"""Fixtures for the store tests: the config of the untrained run ``save_untrained`` (in
tests/conftest.py) saves by default."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def run_config(digits_run_config) -> dict[str, Any]:
    """The config of an untrained width-8 digits MLP run (``save_untrained``'s default), with
    ``train = {"epochs": 1}``: a fresh dict per test."""
    return digits_run_config({"input_size": 64, "width": 8, "num_classes": 10}, epochs=1)
