"""Barriers of a path without an accuracy (a task without one, e.g. a regression): the loss
barriers are computed, the accuracy barriers are ``None``; a path without losses is refused."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from lmc.config import LmcError
from lmc.metrics import barriers, evaluate_path
from lmc.metrics.barriers import BARRIER_KEYS, loss_barrier, midpoint_loss_barrier

ACCURACY_KEYS = ("accuracy_barrier", "midpoint_accuracy_barrier", "mean_minus_min_accuracy")


def test_a_path_without_accuracy_has_loss_barriers_and_no_accuracy_ones():
    lam, loss = [0.0, 0.5, 1.0], [1.0, 3.0, 2.0]
    found = barriers({"lambdas": lam, "loss": loss, "accuracy": None})
    assert tuple(found) == BARRIER_KEYS
    assert found["loss_barrier"] == 3.0 - 1.5  # L(½) − ½(L_0 + L_1), the maximum here
    assert found["midpoint_loss_barrier"] == 1.5
    assert found["max_minus_mean_loss"] == 1.5
    assert all(found[key] is None for key in ACCURACY_KEYS)
    with pytest.raises(LmcError, match="barriers need the path's 'loss' values"):
        barriers({"lambdas": lam, "loss": None, "accuracy": [1.0, 0.5, 1.0]})


def test_path_result_barriers_without_accuracy(mlp_pair, digits):
    model_a, model_b = mlp_pair
    x, y = digits[2], digits[3]
    path = evaluate_path(model_a, model_b, x, y, 3, calibrate=False)
    without = dataclasses.replace(path, accuracy=None, ensemble_accuracy=None)
    found = without.barriers()
    full = path.barriers()
    for key in BARRIER_KEYS:
        assert found[key] == (None if key in ACCURACY_KEYS else full[key])
    assert found["loss_barrier"] == loss_barrier(path.lambdas, path.loss)
    assert found["midpoint_loss_barrier"] == midpoint_loss_barrier(path.lambdas, path.loss)
    assert torch.isfinite(torch.tensor(found["loss_barrier"]))
