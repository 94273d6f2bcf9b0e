"""Orthogonal weight matching (lmc.perm.orthogonal_match): Procrustes is the exact maximiser of
⟨Q, C⟩ over orthogonal Q; and on canonical transformers (zoo gpt and vit, Hugging Face GPT-2) a
known random orthogonal map of the residual stream combined with random permutations of the MLP
units, heads and within-head dims is recovered: the aligned B equals A to 1e-4 (and the stream
map found is the inverse of the one applied)."""

from __future__ import annotations

import copy

import pytest
import torch

from lmc.config import LmcError
from lmc.models import build
from lmc.perm.alignment_map import Alignment, random_alignment
from lmc.perm.canonical import canonicalize
from lmc.perm.orthogonal_match import (
    cross_product,
    default_orthogonal_groups,
    orthogonal_weight_matching,
    procrustes,
)
from lmc.perm.symmetry import symmetry_spec
from lmc.perm.transforms import Orthogonal, haar_orthogonal

WIDTH, HEADS = 16, 2  # two heads: few within-head assignments (each a LAP)


def test_procrustes_is_the_best_orthogonal_map() -> None:
    gen = torch.Generator().manual_seed(0)
    q = haar_orthogonal(6, gen)[0]
    a = torch.randn(6, 20, generator=gen, dtype=torch.float64)
    b = q.T @ a  # Q b = a
    found = procrustes(a @ b.T)
    assert torch.allclose(found, q, atol=1e-12)
    cross = torch.randn(6, 6, generator=gen, dtype=torch.float64)
    best = float((procrustes(cross) * cross).sum())
    for _ in range(20):  # no other orthogonal map does better
        assert float((haar_orthogonal(6, gen)[0] * cross).sum()) <= best + 1e-12


def _gpt():
    return build("gpt", vocab=11, context=6, width=WIDTH, depth=2, heads=HEADS, tied=True), (
        torch.randint(0, 11, (2, 6), generator=torch.Generator().manual_seed(0))
    )


def _vit():
    model = build("vit", in_channels=1, image_size=4, num_classes=5, width=WIDTH, depth=2,
                  heads=HEADS, patch=2)  # fmt: skip
    return model, torch.randn(2, 1, 4, 4, dtype=torch.float64)


def _hf_gpt2():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=1, n_embd=WIDTH, n_head=HEADS, n_inner=32, vocab_size=11, n_positions=8,
        attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    return transformers.GPT2LMHeadModel(config), torch.randint(0, 11, (2, 6))


@pytest.mark.parametrize("builder", [_gpt, _vit, _hf_gpt2], ids=["gpt", "vit", "hf_gpt2"])
def test_known_orthogonal_and_permutations_are_recovered(builder) -> None:
    model, x = builder()
    model = canonicalize(model.double().eval())
    spec = symmetry_spec(model, x)
    (stream,) = default_orthogonal_groups(spec)
    state_a = model.state_dict()
    known = dict(random_alignment(spec, 3, "permutation"))  # units, heads, within-head dims
    known[stream] = Orthogonal.random(spec.group_sizes[stream], 4)
    state_b = Alignment(known).apply(spec, state_a)
    result = orthogonal_weight_matching(spec, state_a, state_b, seed=0)
    aligned = result.alignment.apply(spec, state_b)
    for name, want in state_a.items():
        assert torch.allclose(aligned[name], want, rtol=0, atol=1e-4), name
    assert result.orthogonal_groups == (stream,) and result.converged
    assert result.objective_after > result.objective_before
    q_found, q_known = result.alignment[stream].matrix(), known[stream].matrix()
    assert torch.allclose(q_found @ q_known, torch.eye(WIDTH, dtype=torch.float64), atol=1e-8)
    # the objective never decreases from one round to the next
    per_pass = result.objective_per_pass
    assert all(b >= a - 1e-9 * abs(a) for a, b in zip(per_pass, per_pass[1:]))


def test_cross_product_and_refusals() -> None:
    model, x = _gpt()
    spec = symmetry_spec(model, x)  # not canonical: the stream has LayerNorm gains
    assert default_orthogonal_groups(spec) == []
    state = model.state_dict()
    with pytest.raises(LmcError, match="elementwise norm parameter"):
        cross_product(spec, "tok", state, state)
    with pytest.raises(LmcError, match="admits permutation maps only"):
        orthogonal_weight_matching(spec, state, state, orthogonal_groups=["tok"])
    with pytest.raises(LmcError, match="not a group"):
        orthogonal_weight_matching(spec, state, state, orthogonal_groups=["nope"])
    with pytest.raises(LmcError, match="SymmetrySpec"):
        orthogonal_weight_matching(spec.spec, state, state)


@pytest.mark.parametrize("builder", [_gpt, _vit, _hf_gpt2], ids=["gpt", "vit", "hf_gpt2"])
def test_orthogonal_activation_matching_recovers_a_known_map(builder) -> None:
    """Procrustes on the stream's features and activation matching for the rest: the aligned
    B equals A, and the stream map found is the inverse of the one applied."""
    from lmc.perm.orthogonal_activation import orthogonal_activation_matching

    model, x = builder()
    model = canonicalize(model.double().eval())
    spec = symmetry_spec(model, x)
    (stream,) = default_orthogonal_groups(spec)
    state_a = model.state_dict()
    known = dict(random_alignment(spec, 5, "permutation"))
    known[stream] = Orthogonal.random(spec.group_sizes[stream], 6)
    model_b = copy.deepcopy(model)
    model_b.load_state_dict(Alignment(known).apply(spec, state_a))
    inputs = x.repeat(8, *[1] * (x.dim() - 1))
    if inputs.is_floating_point():
        inputs = torch.randn(inputs.shape, generator=torch.Generator().manual_seed(1),
                             dtype=inputs.dtype)  # fmt: skip
    else:
        inputs = torch.randint(0, 11, inputs.shape, generator=torch.Generator().manual_seed(1))
    result = orthogonal_activation_matching(spec, model, model_b, inputs, batch_size=5)
    aligned = result.alignment.apply(spec, model_b.state_dict())
    for name, want in state_a.items():
        assert torch.allclose(aligned[name], want, rtol=0, atol=1e-6), name
    assert result.orthogonal_groups == (stream,) and result.examples == inputs.shape[0]
    q_found, q_known = result.alignment[stream].matrix(), known[stream].matrix()
    assert torch.allclose(q_found @ q_known, torch.eye(WIDTH, dtype=torch.float64), atol=1e-8)


def test_orthogonal_activation_matching_refuses_what_it_cannot_do() -> None:
    from lmc.perm.orthogonal_activation import orthogonal_activation_matching

    model, x = _gpt()
    model = canonicalize(model.double().eval())
    spec = symmetry_spec(model, x)
    with pytest.raises(LmcError, match="statistic"):
        orthogonal_activation_matching(spec, model, model, x, statistic="moment")
    nested = next(iter(spec.heads))
    with pytest.raises(LmcError, match="not a dense orthogonal map"):
        orthogonal_activation_matching(spec, model, model, x, orthogonal_groups=[nested])
    with pytest.raises(LmcError, match="SymmetrySpec"):
        orthogonal_activation_matching(spec.spec, model, model, x)
