"""Shared fixtures: small datasets and quick training for tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from lmc.data import load


@pytest.fixture(scope="session")
def digits():
    return load("digits")


@pytest.fixture(scope="session")
def load_script():
    """``load_script(name)``: ``scripts/<name>.py`` imported as a module (the scripts are not
    a package), so tests can call its functions."""
    root = Path(__file__).resolve().parents[1]

    def load(name: str):
        spec = importlib.util.spec_from_file_location(name, root / "scripts" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path, monkeypatch):
    """Never read or write the user's run store or cache from a test."""
    monkeypatch.setenv("LMC_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    torch.set_grad_enabled(True)
