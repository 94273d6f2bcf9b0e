"""The seeded Gaussian-mixture task."""

from __future__ import annotations

import pytest
import torch

from lmc.config import LmcError
from lmc.data import load


def _nearest_class_mean_accuracy(ds) -> float:
    x_tr, x_te = ds.x_train.flatten(1), ds.x_test.flatten(1)
    means = torch.stack([x_tr[ds.y_train == k].mean(0) for k in range(ds.num_classes)])
    pred = torch.cdist(x_te, means).argmin(1)
    return (pred == ds.y_test).float().mean().item()


def test_defaults():
    ds = load("synthetic")
    assert ds.name == "synthetic" and ds.num_classes == 10 and ds.augment is False
    assert ds.input_shape == (32,) and ds.input_size == 32
    assert ds.x_train.shape == (4096, 32) and ds.x_test.shape == (1024, 32)
    assert ds.x_train.dtype == torch.float32 and ds.y_train.dtype == torch.int64
    assert torch.bincount(ds.y_train).tolist() == [410] * 6 + [409] * 4  # balanced: i % 10
    # Flat input: normalised per feature with training statistics.
    assert len(ds.mean) == 32
    assert torch.allclose(ds.x_train.double().mean(0), torch.zeros(32, dtype=torch.float64),
                          atol=1e-5)  # fmt: skip
    assert torch.allclose(ds.x_train.double().std(0, unbiased=False),
                          torch.ones(32, dtype=torch.float64), atol=1e-5)  # fmt: skip


def test_image_like_shape_and_options():
    ds = load("synthetic", input_shape=(3, 4, 5), num_classes=4, train_size=100, test_size=30)
    assert ds.input_shape == (3, 4, 5) and ds.input_size == 60 and ds.num_classes == 4
    assert ds.x_train.shape == (100, 3, 4, 5) and ds.x_test.shape == (30, 3, 4, 5)
    assert len(ds.mean) == 3  # per channel for image-like shapes
    per_channel = ds.x_train.double().transpose(0, 1).flatten(1)
    assert torch.allclose(per_channel.mean(1), torch.zeros(3, dtype=torch.float64), atol=1e-5)
    assert set(ds.y_test.tolist()) <= set(range(4))
    assert load("synthetic", input_shape=16).input_shape == (16,)


def test_deterministic_and_seeded():
    a, b = load("synthetic", seed=3), load("synthetic", seed=3)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    assert a.mean == b.mean
    c = load("synthetic", seed=4)
    assert not torch.equal(a.x_train, c.x_train)
    # The test set's raw draws do not depend on train_size (only its normalisation does).
    small = load("synthetic", seed=3, train_size=500)
    assert torch.equal(small.y_test, a.y_test)
    raw_a = a.x_test.double() * torch.tensor(a.std) + torch.tensor(a.mean)
    raw_s = small.x_test.double() * torch.tensor(small.std) + torch.tensor(small.mean)
    assert torch.allclose(raw_a, raw_s, atol=1e-4)


def test_learnable_and_separation_controls_difficulty():
    acc = _nearest_class_mean_accuracy(load("synthetic"))
    assert acc > 0.75  # chance is 0.1
    hard = _nearest_class_mean_accuracy(load("synthetic", separation=0.0))
    assert hard < 0.2
    easy = _nearest_class_mean_accuracy(load("synthetic", separation=8.0))
    assert easy > acc
    image = load("synthetic", input_shape=(3, 8, 8), train_size=1000, test_size=500)
    assert _nearest_class_mean_accuracy(image) > 0.6


def test_multimodal_classes_defeat_class_means():
    one = _nearest_class_mean_accuracy(load("synthetic", separation=6.0))
    many = _nearest_class_mean_accuracy(load("synthetic", separation=6.0, clusters_per_class=4))
    assert many < one - 0.2


@pytest.mark.parametrize(
    "options",
    [
        {"input_shape": (0, 3)},
        {"input_shape": "abc"},
        {"input_shape": (2.5,)},
        {"num_classes": 1},
        {"train_size": 0},
        {"separation": -1},
        {"seed": -1},
        {"noise_level": 3},
    ],
)
def test_bad_options(options):
    with pytest.raises(LmcError):
        load("synthetic", **options)
