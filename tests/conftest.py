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


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    """The whole session at one PyTorch thread, and ``OMP_NUM_THREADS=1`` for the processes
    the tests start: the tests' models are tiny, where a second thread only adds
    synchronisation, and on a shared machine two spinning threads per process can make a
    test several times slower (lmc's own training defaults to one thread as well). Session
    scope, so module- and session-scoped fixtures that train models get it too."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path, monkeypatch):
    """Never read or write the user's run store or cache from a test; every test starts at
    one PyTorch thread (see ``_one_thread``), whatever the test before it left."""
    monkeypatch.setenv("LMC_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    torch.set_num_threads(1)
    torch.set_grad_enabled(True)
