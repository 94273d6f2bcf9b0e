"""Matching with attention heads: a known random permutation (heads shuffled, dims within
heads shuffled) of a transformer is recovered exactly by weight and activation matching."""

from __future__ import annotations

import copy

import pytest
import torch

from lmc.perm import (
    activation_matching,
    apply_permutation,
    random_permutation,
    spec_from_model,
    weight_matching,
)
from lmc.perm.heads import compose_heads, nested_assignment

KINDS = {
    "hand_sdpa": lambda A: lambda d, h: A.HandAttention(d, h),
    "fused_split": lambda A: lambda d, h: A.HandAttention(d, h, qkv="split"),
    "fused_view": lambda A: lambda d, h: A.HandAttention(d, h, qkv="view"),
    "fused_timm": lambda A: lambda d, h: A.HandAttention(d, h, qkv="timm"),
    "rope": lambda A: lambda d, h: A.HandAttention(d, h, rope=True),
    "mha": lambda A: lambda d, h: A.MHAAttention(d, h, False, True),
    "mha_separate": lambda A: lambda d, h: A.MHAAttention(d, h, True, True, separate=True),
}


def _setup(attention_models, kind: str, seed: int):
    torch.manual_seed(seed)
    model = attention_models.TinyTransformer(KINDS[kind](attention_models)).eval()
    x = torch.randn(64, 7, 5, generator=torch.Generator().manual_seed(seed))
    spec = spec_from_model(model, x[:2])
    perm = random_permutation(spec, seed + 10)
    assert any(
        h in perm and not torch.equal(perm[h], torch.arange(4)) for h, _ in spec.heads.values()
    )
    state_a = model.state_dict()
    return model, x, spec, state_a, apply_permutation(spec, perm, state_a)


@pytest.mark.parametrize("kind", list(KINDS))
def test_weight_matching_recovers_a_shuffle_of_heads_exactly(attention_models, kind):
    _, _, spec, state_a, state_b = _setup(attention_models, kind, 0)
    result = weight_matching(spec, state_a, state_b, seed=1)
    back = apply_permutation(spec, result.perm, state_b)
    for k in state_a:
        assert torch.equal(back[k], state_a[k]), k


@pytest.mark.parametrize("kind", ["hand_sdpa", "fused_split", "fused_view", "fused_timm"])
def test_activation_matching_recovers_a_shuffle_of_heads_exactly(attention_models, kind):
    model, x, spec, state_a, state_b = _setup(attention_models, kind, 2)
    model_b = copy.deepcopy(model)
    model_b.load_state_dict(state_b)
    result = activation_matching(spec, model, model_b, x)
    back = apply_permutation(spec, result.perm, state_b)
    for k in state_a:
        assert torch.equal(back[k], state_a[k]), k


def test_nested_assignment_is_exact_on_a_planted_structure():
    gen = torch.Generator().manual_seed(0)
    head = torch.tensor([2, 0, 3, 1])
    within = torch.stack([torch.randperm(3, generator=gen) for _ in range(4)])
    p = compose_heads(head, within)
    s = torch.rand(12, 12, generator=gen, dtype=torch.float64) * 0.1
    s[torch.arange(12), p] += 1.0
    other = torch.rand(12, 12, generator=gen, dtype=torch.float64) * 0.1
    q = compose_heads(head, torch.stack([torch.randperm(3, generator=gen) for _ in range(4)]))
    other[torch.arange(12), q] += 1.0
    got_head, (got_p, got_q), value = nested_assignment(None, [s, other], 4)
    assert torch.equal(got_head, head) and torch.equal(got_p, p) and torch.equal(got_q, q)
    assert value == pytest.approx(
        float(s[torch.arange(12), p].sum() + other[torch.arange(12), q].sum())
    )
