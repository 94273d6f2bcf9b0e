"""digits (bundled with scikit-learn) and the Dataset record."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lmc.config import LmcError
from lmc.data import DATASETS, Dataset, load
from lmc.data.loaders import stratified_split


@pytest.fixture(scope="module")
def digits() -> Dataset:
    return load("digits")


def test_digits_shapes_dtypes_and_sizes(digits):
    assert digits.name == "digits"
    assert digits.num_classes == 10
    assert digits.input_shape == (1, 8, 8)
    assert digits.input_size == 64
    assert digits.augment is False
    assert digits.x_train.dtype == torch.float32 and digits.x_test.dtype == torch.float32
    assert digits.y_train.dtype == torch.int64 and digits.y_test.dtype == torch.int64
    assert digits.x_train.shape == (1346, 1, 8, 8)
    assert digits.x_test.shape == (451, 1, 8, 8)
    assert digits.y_train.shape == (1346,) and digits.y_test.shape == (451,)
    assert set(digits.y_train.tolist()) == set(range(10)) == set(digits.y_test.tolist())


def test_digits_normalised_with_training_statistics(digits):
    x = digits.x_train.double()
    assert abs(x.mean().item()) < 1e-5
    assert abs(x.std(unbiased=False).item() - 1) < 1e-5
    # Test split uses the training statistics, so it is only roughly standardised.
    assert abs(digits.x_test.double().mean().item()) < 0.1
    assert len(digits.mean) == len(digits.std) == 1
    # Values 0..16 scaled to [0, 1] before normalising: undoing it gives multiples of 1/16.
    raw = (digits.x_train.double() * digits.std[0] + digits.mean[0]) * 16
    assert torch.allclose(raw, raw.round(), atol=1e-4)
    assert raw.min().item() == pytest.approx(0, abs=1e-4)
    assert raw.max().item() == pytest.approx(16, abs=1e-4)


def test_digits_deterministic(digits):
    again = load("digits")
    for a, b in zip(digits.split("train") + digits.split("test"),
                    again.split("train") + again.split("test")):  # fmt: skip
        assert torch.equal(a, b)
    assert again.mean == digits.mean and again.std == digits.std


def test_stratified_split_is_disjoint_and_stratified():
    y = np.repeat(np.arange(4), [40, 41, 42, 10])
    train, test = stratified_split(y, 0.25, 0)
    assert np.intersect1d(train, test).size == 0
    assert np.array_equal(np.sort(np.concatenate([train, test])), np.arange(len(y)))
    assert [int((y[test] == c).sum()) for c in range(4)] == [10, 10, 11, 3]
    again, _ = stratified_split(y, 0.25, 0)
    assert np.array_equal(train, again)
    other, _ = stratified_split(y, 0.25, 1)
    assert not np.array_equal(train, other)


def test_split_and_to(digits):
    x, y = digits.split("train")
    assert x is digits.x_train and y is digits.y_train
    x, y = digits.split("test")
    assert x is digits.x_test and y is digits.y_test
    with pytest.raises(LmcError, match="'train' or 'test'"):
        digits.split("val")
    moved = digits.to("meta")
    assert moved.x_train.device.type == "meta" and moved.y_test.device.type == "meta"
    assert digits.x_train.device.type == "cpu"  # the original is untouched
    assert moved.mean == digits.mean and moved.input_shape == digits.input_shape
    assert "digits" in repr(digits) and "1346" in repr(digits)


def test_unknown_name_and_options_rejected():
    with pytest.raises(LmcError) as err:
        load("imagenet")
    for name in DATASETS:
        assert name in str(err.value)
    with pytest.raises(LmcError, match="unknown option.*train_size, subset_seed"):
        load("digits", input_shape=[64])


def test_name_aliases():
    assert load("DIGITS").name == "digits"
