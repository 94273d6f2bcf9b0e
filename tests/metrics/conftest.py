"""Shared fixtures for the merge and metrics tests (tests/merge/conftest.py loads these):
digits tensors and small trained MLPs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import lmc.models


def digits_tensors():
    """sklearn's digits, standardised with training statistics: (x_tr, y_tr, x_te, y_te)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32) / 16.0
    y = torch.tensor(d.target, dtype=torch.int64)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    x, y = x[perm], y[perm]
    x_tr, y_tr, x_te, y_te = x[:1300], y[:1300], x[1300:], y[1300:]
    mean, std = x_tr.mean(0), x_tr.std(0).clamp_min(1e-3)
    return (x_tr - mean) / std, y_tr, (x_te - mean) / std, y_te


def train_mlp(seed: int, x, y, *, width: int = 32, steps: int = 150, **options):
    """A small MLP trained full-batch with Adam from ``seed``; returned in eval mode."""
    model = lmc.models.build("mlp", seed=seed, input_size=64, width=width, **options)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls: one thread is fastest, and the CPU is shared
    try:
        for _ in range(steps):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    return model.eval()


@pytest.fixture(scope="session")
def digits():
    return digits_tensors()


@pytest.fixture(scope="session")
def mlp_pair(digits):
    x_tr, y_tr, _, _ = digits
    return train_mlp(0, x_tr, y_tr), train_mlp(1, x_tr, y_tr)


@pytest.fixture(scope="session")
def perfect_subset(digits, mlp_pair):
    """``(x, y)``: 400 training examples that A of ``mlp_pair`` classifies every one correctly
    (a calibration subset on which A's fitted temperature runs to its bound)."""
    x_tr, y_tr, _, _ = digits
    with torch.no_grad():
        right = mlp_pair[0](x_tr).argmax(1) == y_tr
    return x_tr[right][:400], y_tr[right][:400]


@pytest.fixture(scope="session")
def bn_pair(digits):
    """Two small BatchNorm MLPs trained from seeds 0 and 1."""
    x_tr, y_tr, _, _ = digits
    return (
        train_mlp(0, x_tr, y_tr, norm="batch", steps=60),
        train_mlp(1, x_tr, y_tr, norm="batch", steps=60),
    )


@pytest.fixture(scope="session")
def train_fn():
    """The training helper, for tests that train their own models."""
    return train_mlp
