"""Checks the model tests share: a language model's refusal of bad input and its causal
masking, and a permuted model's function."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

from lmc.config import LmcError
from lmc.perm import apply_permutation, random_permutation, spec_from_model


def _assert_causal(model: nn.Module, x: torch.Tensor, vocab: int) -> None:
    """Changing token ``j`` of ``x`` (N, T) leaves the logits at positions before ``j``
    bit-identical and changes them at ``j`` and (where there are any) after it."""
    base = model(x)
    length = x.shape[1]
    for j in range(length):
        y = x.clone()
        y[:, j] = (y[:, j] + 1) % vocab
        out = model(y)
        torch.testing.assert_close(out[:, :j], base[:, :j], atol=0, rtol=0)
        assert not torch.allclose(out[:, j], base[:, j])  # position j sees token j
        if j + 1 < length:
            assert not torch.allclose(out[:, j + 1 :], base[:, j + 1 :])


def _assert_refuses_bad_tokens(model: nn.Module, too_long: torch.Tensor, context: int) -> None:
    """``too_long`` (tokens past the model's ``context``) and float input are one-line
    errors."""
    with pytest.raises(LmcError, match=f"exceed the context of {context}"):
        model(too_long)
    with pytest.raises(LmcError, match="integer token ids"):
        model(torch.randn(2, 5))


def _assert_permutation_keeps_function(
    model: nn.Module, x: torch.Tensor, seed: int, moved: str
) -> None:
    """``random_permutation(spec, seed)`` of ``model``'s traced spec moves the weight ``moved``
    and leaves the function on ``x`` as it was (to 1e-5)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = spec_from_model(model, x[:2])
    state = apply_permutation(spec, random_permutation(spec, seed), model.state_dict())
    assert not torch.equal(state[moved], model.state_dict()[moved])
    permuted = copy.deepcopy(model)
    permuted.load_state_dict(state)
    torch.testing.assert_close(permuted(x), model(x), atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="session")
def assert_causal():
    """``assert_causal(model, tokens, vocab)``: a later token never changes earlier logits."""
    return _assert_causal


@pytest.fixture(scope="session")
def assert_refuses_bad_tokens():
    """``assert_refuses_bad_tokens(model, too_long, context)``: too long or float input is
    refused."""
    return _assert_refuses_bad_tokens


@pytest.fixture(scope="session")
def assert_permutation_keeps_function():
    """``assert_permutation_keeps_function(model, x, seed, moved)``: a random permutation
    moves the weight ``moved`` and keeps the model's function."""
    return _assert_permutation_keeps_function
