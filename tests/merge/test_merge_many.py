"""Merging N models: Git Re-Basin's iterative merge-many (App. A.10) and the anchored merge."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lmc.config import LmcError
from lmc.merge import IterativeMerge, average, merge_many, merge_many_iterative
from lmc.models import build
from lmc.perm import apply_permutation, check_permutation, random_permutation, spec_from_model

OPTIONS = dict(input_size=64, width=24, depth=3)


def _model(state=None, **options):
    model = build("mlp", **{**OPTIONS, **options}).eval()
    if state is not None:
        model.load_state_dict(state)
    return model


@pytest.fixture(scope="module")
def permuted_copies():
    ref = build("mlp", seed=3, **OPTIONS).eval()
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    spec = spec_from_model(ref, x[:2])
    states = [ref.state_dict()] + [
        apply_permutation(spec, random_permutation(spec, seed), ref.state_dict())
        for seed in (11, 12, 13, 14)
    ]
    return ref, x, spec, states


def test_iterative_merge_of_permuted_copies_is_the_model(permuted_copies):
    ref, x, spec, states = permuted_copies
    result = merge_many_iterative(states, spec=spec, seed=0)
    assert isinstance(result, IterativeMerge)
    assert result.converged and result.changes[-1] == 0 and result.rounds == len(result.changes)
    for perm in result.perms:
        check_permutation(spec, perm)
    with torch.no_grad():
        torch.testing.assert_close(_model(result.state)(x), ref(x), atol=1e-5, rtol=0)
    # the merge_many entry point gives the same state; the spec may come from a module
    via_many = merge_many(states, align="weight-iterative", model=ref, example_input=x[:2])
    for key, value in result.state.items():
        torch.testing.assert_close(via_many[key], value)
    # starting from copies whose first one is not the reference changes nothing either
    shuffled = merge_many_iterative(states[::-1], spec=spec, seed=1)
    with torch.no_grad():
        torch.testing.assert_close(_model(shuffled.state)(x), ref(x), atol=1e-5, rtol=0)


def test_anchored_merge_of_permuted_copies_is_the_model_but_plain_average_is_not(
    permuted_copies,
):
    ref, x, spec, states = permuted_copies
    anchored = merge_many(states, align="weight", spec=spec, reference=2)
    plain = merge_many(states)
    with torch.no_grad():
        torch.testing.assert_close(_model(anchored)(x), ref(x), atol=1e-5, rtol=0)
        assert (_model(plain)(x) - ref(x)).abs().max() > 1e-2


def _train(seed: int, x: torch.Tensor, y: torch.Tensor):
    model = build("mlp", seed=seed, input_size=64, width=32, depth=2)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(120):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return model.eval()


def test_iterative_merge_of_trained_models(digits_dataset):
    digits = digits_dataset
    x, y = digits.x_train.flatten(1), digits.y_train
    models = [_train(seed, x, y) for seed in (0, 1, 2)]
    result = merge_many_iterative(models, example_input=x[:2], seed=0, weights=[1, 2, 1])
    assert result.converged and result.changes[-1] == 0
    # the state is the weighted mean of the inputs under the returned permutations
    spec = spec_from_model(models[0], x[:2])
    permuted = [apply_permutation(spec, p, m.state_dict()) for p, m in zip(result.perms, models)]
    expected = average(permuted, [1, 2, 1])
    for key, value in expected.items():
        torch.testing.assert_close(result.state[key], value)
    # deterministic: the same seed gives the same permutations
    again = merge_many_iterative(models, example_input=x[:2], seed=0, weights=[1, 2, 1])
    assert all(torch.equal(a[g], b[g]) for a, b in zip(result.perms, again.perms) for g in a)
    # alignment makes the merge better than plain averaging (Git Re-Basin Table 3)
    x_te, y_te = digits.x_test.flatten(1), digits.y_test
    shape = dict(input_size=64, width=32, depth=2)
    with torch.no_grad():
        aligned_loss = F.cross_entropy(_model(result.state, **shape)(x_te), y_te)
        plain_loss = F.cross_entropy(_model(merge_many(models), **shape)(x_te), y_te)
    assert aligned_loss < plain_loss
    one = merge_many_iterative(models, example_input=x[:2], seed=0, max_rounds=1)
    assert one.rounds == 1 and len(one.changes) == 1


def test_bad_input():
    a = build("mlp", seed=0, **OPTIONS)
    b = build("mlp", seed=1, input_size=64, width=20, depth=3)
    x = torch.zeros(2, 64)
    with pytest.raises(LmcError, match="model 1"):
        merge_many_iterative([a, b], example_input=x)
    with pytest.raises(LmcError, match="max_rounds"):
        merge_many_iterative([a, a], example_input=x, max_rounds=0)
    with pytest.raises(LmcError, match="spec"):
        merge_many_iterative([a.state_dict(), a.state_dict()])
    with pytest.raises(LmcError, match="weights"):
        merge_many_iterative([a, a], example_input=x, weights=[1.0])
    with pytest.raises(LmcError, match="at least one"):
        merge_many_iterative([])
    with pytest.raises(LmcError, match="alignment"):
        merge_many([a, a], align="activation")
