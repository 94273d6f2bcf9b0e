"""``train_size``: a seeded random training subset of any real dataset (the test split whole)."""

import pytest
import torch

from lmc.config import LmcError
from lmc.data import load, random_train_subset


def test_a_subset_is_seeded_drawn_from_the_split_and_in_its_order():
    full = load("digits")
    a = load("digits", train_size=300)
    again = load("digits", train_size=300, subset_seed=0)
    other = load("digits", train_size=300, subset_seed=1)
    assert a.x_train.shape == (300, *full.input_shape) and a.y_train.shape == (300,)
    assert torch.equal(a.x_train, again.x_train) and torch.equal(a.y_train, again.y_train)
    assert not torch.equal(a.y_train, other.y_train)
    # every example is one of the full split's, in the full split's order
    rows = full.x_train.flatten(1)
    where = [int(torch.nonzero((rows == r).all(1))[0]) for r in a.x_train.flatten(1)]
    assert where == sorted(where) and len(set(where)) == 300
    assert torch.equal(full.y_train[where], a.y_train)
    assert torch.equal(a.x_test, full.x_test) and (a.mean, a.std) == (full.mean, full.std)


def test_the_whole_split_is_every_example():
    full = load("digits")
    same = random_train_subset(full, full.y_train.numel(), seed=3)
    assert torch.equal(same.x_train, full.x_train)


@pytest.mark.parametrize(
    "options, fragment",
    [
        ({"train_size": 0}, "train_size must be at least 1"),
        ({"train_size": 10**6}, "exceeds the 1346 training examples"),
        ({"train_size": 2.5}, "train_size must be an integer"),
        ({"subset_seed": 1}, "subset_seed needs train_size"),
        ({"train_size": 10, "subset_seed": -1}, "subset_seed must be at least 0"),
        ({"size": 10}, "unknown option"),
    ],
)
def test_bad_subset_options_are_refused(options, fragment):
    with pytest.raises(LmcError, match=fragment):
        load("digits", **options)


def test_lmc_train_records_the_subset_in_the_run_config(tmp_path, capsys):
    import json

    from lmc.cli.main import main

    argv = ["train", "--width", "8", "--epochs", "1", "--quiet", "--json", "--train-size", "64",
            "--runs-dir", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["dataset_options"] == {"train_size": 64}
