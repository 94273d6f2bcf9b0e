"""A user's data file may declare its task (key ``task``): its targets are then the task's,
checked by it, split at random when there is no test split; a file without the key is read
as classification, as before."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from lmc.config import LmcError
from lmc.data.user_file import load_user_data


@pytest.fixture
def values(regression_task):
    """A registered task of float targets (N, D)."""
    return regression_task


def _arrays(n: int = 40):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 4)).astype(np.float32), rng.normal(size=(n, 3))


def test_a_file_declares_its_task(tmp_path, values):
    x, y = _arrays()
    np.savez(tmp_path / "v.npz", x=x, y=y, task=np.array(values.name))
    data = load_user_data(tmp_path / "v.npz")
    assert data.task == values.name and data.num_classes == 3
    assert data.y_train.dtype == torch.float32 and data.y_train.shape[1:] == (3,)
    k = 10  # round(25% of 40): a seeded random test split
    expected = np.sort(np.random.default_rng(0).permutation(40)[:k])
    assert torch.equal(data.x_test, torch.from_numpy(x[expected]))
    assert torch.allclose(data.y_test.double(), torch.from_numpy(y[expected]), atol=1e-6)
    assert len(data.x_train) == 30
    save_file({"x": torch.from_numpy(x), "y": torch.from_numpy(y).float()},
              str(tmp_path / "v.safetensors"), metadata={"task": values.name})  # fmt: skip
    assert load_user_data(tmp_path / "v.safetensors").task == values.name


def test_a_files_task_is_checked(tmp_path, values):
    x, y = _arrays()
    np.savez(tmp_path / "plain.npz", x=x, y=np.arange(40) % 4)
    assert load_user_data(tmp_path / "plain.npz").task == "classification"
    cases = {
        "unknown.npz": ({"y": y, "task": np.array("no-such-task")}, "task 'no-such-task'.*not reg"),
        "list.npz": ({"y": y, "task": np.array(["a", "b"])}, "must be one string naming the task"),
        "ints.npz": ({"y": np.arange(40), "task": np.array(values.name)}, "float values"),
        "short.npz": ({"y": y[:5], "task": np.array(values.name)}, "holds 5 targets but 'x' 40"),
    }
    for name, (given, match) in cases.items():
        np.savez(tmp_path / name, x=x, **given)
        with pytest.raises(LmcError, match=match):
            load_user_data(tmp_path / name)
