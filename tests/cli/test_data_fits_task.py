"""``check_data_fits`` (a user's model against ``--data``) asks the data's task: class logits
per example or per position for classification and next-token (today's messages), and the
task's own check for any other task."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lmc.cli.common import check_data_fits
from lmc.config import LmcError
from lmc.data import Dataset

SOURCE = "the model from f.py:make"


def _data(x, y, num_classes, task="classification") -> Dataset:
    shape = tuple(x.shape[1:])
    return Dataset("toy.npz", x, y, x, y, num_classes, shape, (0.0,), (1.0,), False, task)


def _refusal(model, data) -> str:
    with pytest.raises(LmcError) as info:
        check_data_fits(model, data, SOURCE)
    return str(info.value)


def test_classification_and_next_token_keep_their_messages():
    data = _data(torch.randn(4, 3), torch.tensor([0, 1, 2, 1]), 3)
    check_data_fits(nn.Linear(3, 3), data, SOURCE)
    assert (
        _refusal(nn.Linear(3, 2), data) == f"{SOURCE} gives 2 logits but toy.npz has labels up to 2"
    )
    assert "into outputs of shape (2, 3, 1), not logits (2, C)" in _refusal(
        nn.Sequential(nn.Linear(3, 3), nn.Unflatten(1, (3, 1))), data
    )
    tokens = torch.randint(0, 5, (4, 6))
    text = _data(tokens, tokens, 5, "next-token")
    check_data_fits(nn.Embedding(5, 5), text, SOURCE)
    assert "predicts 4 token ids but the text's tokenizer has 5" in _refusal(
        nn.Embedding(5, 4), text
    )
    assert "not next-token logits (2, T, V)" in _refusal(
        nn.Sequential(nn.Embedding(5, 5), nn.Flatten()), text
    )


def test_another_task_is_checked_by_the_task(regression_task):
    x = torch.randn(4, 3)
    data = _data(x, torch.randn(4, 2), 2, regression_task.name)
    check_data_fits(nn.Linear(3, 2), data, SOURCE)
    message = _refusal(nn.Linear(3, 3), data)  # 3 values for targets of 2: not logits
    assert message == (
        f"{SOURCE} does not fit the toy-regression task: output (2, 3) does not fit the "
        "labels of toy.npz"
    )
