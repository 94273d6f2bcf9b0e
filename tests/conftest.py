"""Shared fixtures: small datasets and quick training for tests."""

from __future__ import annotations

import pytest
import torch

from lmc.data import load


@pytest.fixture(scope="session")
def digits():
    return load("digits")


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path, monkeypatch):
    """Never read or write the user's run store or cache from a test."""
    monkeypatch.setenv("LMC_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    torch.set_grad_enabled(True)
