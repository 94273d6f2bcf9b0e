"""Stitching without an adapter (LLFC App. B.4): endpoints, permuted copies, segments."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lmc.analysis import num_stitch_layers, stitch, stitch_segments, stitching_errors
from lmc.config import LmcError
from lmc.models import build
from lmc.perm import (
    apply_permutation,
    invert_permutation,
    random_permutation,
    spec_from_model,
    weight_matching,
)


def _train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int = 120) -> nn.Module:
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return model.eval()


@pytest.fixture(scope="module")
def trained(digits):
    x, y = digits.x_train, digits.y_train
    a = _train(build("mlp", seed=0, input_size=64, width=24, depth=3), x, y)
    b = _train(build("mlp", seed=1, input_size=64, width=24, depth=3), x, y)
    return a, b


def _error(model: nn.Module, digits) -> float:
    with torch.no_grad():
        return float((model(digits.x_test).argmax(1) != digits.y_test).double().mean())


def test_endpoints_are_b_and_a(trained, digits):
    a, b = trained
    assert num_stitch_layers(a) == 4  # three hidden layers and the logits
    errors = stitching_errors(a, b, digits)
    assert len(errors) == 5
    assert errors[0] == _error(b, digits)
    assert errors[-1] == _error(a, digits)
    assert errors[0] != errors[-1] or not torch.equal(a.fc1.weight, b.fc1.weight)
    # the same numbers from an (inputs, labels) pair
    assert stitching_errors(a, b, (digits.x_test, digits.y_test), batch_size=50) == errors
    x = digits.x_test[:16]
    with torch.no_grad():
        assert torch.equal(stitch(a, b, 0)(x), b(x))
        assert torch.equal(stitch(a, b, 4)(x), a(x))
        # layer 2: A's fc1, fc2, then B's fc3 and out
        mixed = b.out(b.act3(b.fc3(a.act2(a.fc2(a.act1(a.fc1(x.flatten(1))))))))
        torch.testing.assert_close(stitch(a, b, 2)(x), mixed)


def test_permuted_copy_stitches_with_the_same_error_once_aligned(trained, digits):
    a, _ = trained
    spec = spec_from_model(a, digits.x_train[:2])
    known = random_permutation(spec, seed=5)
    copy = build("mlp", input_size=64, width=24, depth=3).eval()
    copy.load_state_dict(apply_permutation(spec, known, a.state_dict()))
    base = _error(a, digits)
    # unaligned, the copy's units are in another order: stitching in the middle breaks
    unaligned = stitching_errors(a, copy, digits)
    assert unaligned[0] == base and unaligned[-1] == base
    assert max(unaligned[1:-1]) > base + 0.2
    # aligned by the known permutation (weight matching finds the same one)
    undo = invert_permutation(known)
    found = weight_matching(spec, a.state_dict(), copy.state_dict(), seed=0).perm
    assert all(torch.equal(found[g], undo[g]) for g in undo)
    aligned = build("mlp", input_size=64, width=24, depth=3).eval()
    aligned.load_state_dict(apply_permutation(spec, undo, copy.state_dict()))
    assert stitching_errors(a, aligned, digits) == [base] * 5


@pytest.mark.parametrize(
    "name, options, layers",
    [
        ("vgg11", {"width": 0.0625, "in_channels": 1}, 9),
        ("resnet20", {"width": 0.25, "in_channels": 1}, 11),
    ],
)
def test_cnn_segments_compose_to_the_model(name, options, layers, digits):
    a = build(name, seed=0, **options).eval()
    b = build(name, seed=1, **options).eval()
    x = digits.x_test[:8]
    assert num_stitch_layers(a) == layers
    with torch.no_grad():
        out = x
        for segment in stitch_segments(a):
            out = segment(out)
        torch.testing.assert_close(out, a(x))
        torch.testing.assert_close(stitch(a, b, 0)(x), b(x))
        torch.testing.assert_close(stitch(a, b, layers)(x), a(x))
    errors = stitching_errors(a, b, (digits.x_test[:64], digits.y_test[:64]))
    assert len(errors) == layers + 1


def test_sequential_models_and_bad_input():
    seq = nn.Sequential(nn.Flatten(), nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3))
    other = nn.Sequential(nn.Flatten(), nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3))
    assert num_stitch_layers(seq) == 2
    x = torch.randn(6, 4)
    with torch.no_grad():
        expected = other[3](torch.relu(seq[1](x)))
        torch.testing.assert_close(stitch(seq, other, 1)(x), expected)
    with pytest.raises(LmcError, match="layer"):
        stitch(seq, other, 3)
    with pytest.raises(LmcError, match="layer"):
        stitch(seq, other, -1)
    wider = nn.Sequential(nn.Flatten(), nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))
    with pytest.raises(LmcError):
        stitch(seq, wider, 1)
    with pytest.raises(LmcError, match="data"):
        stitching_errors(seq, other, torch.zeros(3, 4))

    class Custom(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x)

    with pytest.raises(LmcError, match="Custom"):
        stitch(Custom(), Custom(), 1)
