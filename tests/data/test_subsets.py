"""Training subsets by label (Git Re-Basin §5.4): counts, seeding, disjointness."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from lmc.config import LmcError
from lmc.data.dataset import Dataset
from lmc.data.subsets import ab_split, label_counts, label_split_subset, label_split_subsets


def _dataset(per_label=(10, 7, 13, 20, 5, 11, 9, 30, 1, 0)) -> Dataset:
    """x_train[i] = i (so examples can be told apart), labels interleaved."""
    labels = torch.cat([torch.full((n,), k) for k, n in enumerate(per_label)])
    labels = labels[torch.randperm(len(labels), generator=torch.Generator().manual_seed(9))]
    n = len(labels)
    return Dataset(
        name="toy",
        x_train=torch.arange(n, dtype=torch.float32)[:, None],
        y_train=labels.long(),
        x_test=torch.randn(17, 1),
        y_test=torch.arange(17) % 10,
        num_classes=10,
        input_shape=(1,),
        mean=(0.0,),
        std=(1.0,),
        augment=False,
    )


def _ids(ds: Dataset) -> set[int]:
    return {int(v) for v in ds.x_train[:, 0]}


def _floor(fraction: float, n: int) -> int:
    return math.floor(Fraction(str(fraction)) * n)  # exact decimal arithmetic


def test_counts_are_the_floor_of_the_fraction_per_label():
    ds = _dataset()
    sizes = label_counts(ds.y_train, 10)
    fractions = {0: 0.2, 1: 0.5, (2, 3): 0.3, range(4, 8): 0.75, 8: 1.0}
    sub = label_split_subset(ds, fractions, seed=0)
    got = label_counts(sub.y_train, 10)
    want = [_floor(f, n) for f, n in zip([0.2, 0.5, 0.3, 0.3, 0.75, 0.75, 0.75, 0.75, 1, 0], sizes)]
    assert got == want
    assert got[0] == 2 and got[1] == 3 and got[8] == 1 and got[9] == 0  # 0.2*10, floor(3.5)
    # rows are kept whole and in the original order; the test split is untouched
    ids = sorted(_ids(sub))
    assert sub.x_train[:, 0].tolist() == ids
    assert torch.equal(sub.y_train, ds.y_train[torch.tensor(ids)])
    assert sub.x_test is ds.x_test and sub.y_test is ds.y_test
    assert sub.mean == ds.mean and sub.num_classes == 10 and sub.name == "toy[subset]"


def test_seeded():
    ds = _dataset()
    spec = {range(10): 0.5}
    assert _ids(label_split_subset(ds, spec, 3)) == _ids(label_split_subset(ds, spec, 3))
    assert _ids(label_split_subset(ds, spec, 3)) != _ids(label_split_subset(ds, spec, 4))
    # the single subset is part 0 of a multi-part split with the same seed
    first, _ = label_split_subsets(ds, [spec, {range(10): 0.25}], 3)
    assert _ids(first) == _ids(label_split_subset(ds, spec, 3))


def test_ab_split_is_the_papers_and_disjoint():
    ds = _dataset()
    sizes = label_counts(ds.y_train, 10)
    a, b = ab_split(ds, seed=1)
    assert not (_ids(a) & _ids(b))
    ca, cb = label_counts(a.y_train, 10), label_counts(b.y_train, 10)
    for k, n in enumerate(sizes):
        fa, fb = (0.2, 0.8) if k < 5 else (0.8, 0.2)
        assert ca[k] == _floor(fa, n) and cb[k] == _floor(fb, n), k
    # the fractions are settings; they may leave examples out, but never overlap
    a2, b2 = ab_split(ds, seed=1, minority=0.1, majority=0.5)
    assert not (_ids(a2) & _ids(b2))
    assert label_counts(a2.y_train, 10)[7] == _floor(0.5, sizes[7])
    with pytest.raises(LmcError, match="add up to"):
        ab_split(ds, minority=0.3, majority=0.8)


def test_ab_split_on_digits(digits):
    a, b = ab_split(digits, seed=0)
    sizes = label_counts(digits.y_train, 10)
    assert label_counts(a.y_train, 10) == [
        _floor(0.2 if k < 5 else 0.8, n) for k, n in enumerate(sizes)
    ]
    assert a.x_train.shape[1:] == digits.x_train.shape[1:]
    assert torch.equal(a.x_test, digits.x_test)


def test_bad_specs():
    ds = _dataset()
    with pytest.raises(LmcError, match="label 10"):
        label_split_subset(ds, {10: 0.5})
    with pytest.raises(LmcError, match="twice"):
        label_split_subset(ds, {1: 0.5, (1, 2): 0.2})
    with pytest.raises(LmcError, match="at most 1"):
        label_split_subset(ds, {1: 1.5})
    with pytest.raises(LmcError, match="add up to"):
        label_split_subsets(ds, [{0: 0.6}, {0: 0.5}])
    with pytest.raises(LmcError, match="not a label"):
        label_split_subset(ds, {"cat": 0.5})
    with pytest.raises(LmcError, match="seed"):
        label_split_subset(ds, {0: 0.5}, seed=-1)
    with pytest.raises(LmcError, match="Dataset"):
        label_split_subset((ds.x_train, ds.y_train), {0: 0.5})


def test_label_parts_dataset_option_takes_exactly_the_fractions_per_label():
    from lmc.data import load

    full = load("digits")
    parts = [[0.2] * 5 + [0.8] * 5, [0.8] * 5 + [0.2] * 5]
    a = load("digits", label_parts=parts, subset_seed=3)
    b = load("digits", label_parts=parts, label_part=1, subset_seed=3)
    n = label_counts(full.y_train, 10)
    assert label_counts(a.y_train, 10) == [_floor(parts[0][k], n[k]) for k in range(10)]
    assert label_counts(b.y_train, 10) == [_floor(parts[1][k], n[k]) for k in range(10)]
    rows = {tuple(r.tolist()) for r in full.x_train.flatten(1)}
    rows_a = {tuple(r.tolist()) for r in a.x_train.flatten(1)}
    rows_b = {tuple(r.tolist()) for r in b.x_train.flatten(1)}
    assert rows_a <= rows and rows_b <= rows
    # disjoint as examples (digits holds a few duplicate images, so compare by index instead)
    expected_a, expected_b = label_split_subsets(
        full, [dict(enumerate(parts[0])), dict(enumerate(parts[1]))], seed=3
    )
    assert torch.equal(a.x_train, expected_a.x_train) and torch.equal(b.x_train, expected_b.x_train)
    assert torch.equal(a.x_test, full.x_test)
    assert not torch.equal(a.x_train, load("digits", label_parts=parts, subset_seed=4).x_train)


@pytest.mark.parametrize(
    "options, match",
    [
        ({"label_parts": [[0.5] * 9]}, r"label_parts\[0\] must list one fraction per label \(10"),
        ({"label_parts": [[0.5] * 10], "label_part": 1}, "below the 1 parts"),
        ({"label_parts": [[0.6] * 10, [0.6] * 10]}, "add up to 1.2 > 1"),
        ({"label_parts": [[0.5] * 10], "train_size": 10}, "give one"),
        ({"label_part": 1}, "label_part needs train_size or label_parts"),
        ({"label_parts": "half"}, "non-empty list"),
    ],
)
def test_label_parts_options_are_checked(options, match):
    from lmc.data import load

    with pytest.raises(LmcError, match=match):
        load("digits", **options)
