"""Stitching errors ask the task: the fraction of wrong next-token predictions."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lmc.analysis import stitching_errors
from lmc.config import LmcError
from lmc.data import NEXT_TOKEN, Dataset

VOCAB, T = 5, 4


def _token_model(seed: int) -> nn.Sequential:
    """(N, T) token ids -> (N, T, VOCAB) logits: an embedding, then two Linear layers."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Embedding(VOCAB, 8), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, VOCAB))


def test_stitching_errors_count_positions_of_token_windows():
    a, b = _token_model(0), _token_model(1)
    x = torch.randint(0, VOCAB, (10, T), generator=torch.Generator().manual_seed(0))
    y = (x + 1) % VOCAB
    errors = stitching_errors(a, b, (x, y), task="next-token")
    with torch.no_grad():
        wrong_b = 1 - NEXT_TOKEN.accuracy(b(x), y)
        wrong_a = 1 - NEXT_TOKEN.accuracy(a(x), y)
    assert len(errors) == 3  # L = 2 layers: B, stitched at layer 1, A
    assert errors[0] == pytest.approx(wrong_b, abs=1e-12)
    assert errors[-1] == pytest.approx(wrong_a, abs=1e-12)
    # a dataset brings its own task
    data = Dataset("count", x, y, x, y, num_classes=VOCAB, input_shape=(T,), mean=(0.0,),
                   std=(1.0,), augment=False, task="next-token")  # fmt: skip
    assert stitching_errors(a, b, data) == errors
    with pytest.raises(LmcError, match="1-D"):  # token targets under the classification task
        stitching_errors(a, b, (x, y))
