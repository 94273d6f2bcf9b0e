"""Symmetry specs (lmc.perm.symmetry): axis roles and admissible kinds derived for transformers,
and the proof of both: a random element of every kind (permutation; orthogonal on the residual
stream and within heads; invertible within heads) keeps the function of canonical zoo gpt and
vit and of Hugging Face GPT-2 and ViT, while the stream of a model that still has its
LayerNorms admits permutations only."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import pytest
import torch
from torch import nn

from lmc.config import LmcError
from lmc.models import build
from lmc.perm import random_permutation
from lmc.perm.alignment_map import Alignment, random_alignment
from lmc.perm.canonical import canonicalize
from lmc.perm.symmetry import SymmetrySpec, layer_role, symmetry_spec
from lmc.perm.transforms import KINDS, Orthogonal, kind_rank

WIDTH, HEADS = 16, 4


@dataclass
class Case:
    model: nn.Module
    x: torch.Tensor
    spec: SymmetrySpec
    stream: str


def _case(model: nn.Module, x: torch.Tensor, stream: str) -> Case:
    gen = torch.Generator().manual_seed(0)
    model = model.double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    model = canonicalize(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing may be frozen in these models
        spec = symmetry_spec(model, x)
    return Case(model, x, spec, stream)


def _zoo_gpt() -> Case:
    model = build("gpt", vocab=11, context=6, width=WIDTH, depth=2, heads=HEADS, tied=True)
    return _case(
        model, torch.randint(0, 11, (3, 6), generator=torch.Generator().manual_seed(1)), "tok"
    )


def _zoo_vit() -> Case:
    model = build("vit", in_channels=1, image_size=4, num_classes=5, width=WIDTH, depth=2,
                  heads=HEADS, patch=2)  # fmt: skip
    x = torch.randn(3, 1, 4, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    return _case(model, x, "patch_embed")


def _hf_gpt2() -> Case:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=2, n_embd=WIDTH, n_head=HEADS, n_inner=32, vocab_size=11, n_positions=8,
        attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    x = torch.randint(0, 11, (3, 6), generator=torch.Generator().manual_seed(1))
    return _case(transformers.GPT2LMHeadModel(config), x, "transformer.wte")


def _hf_vit() -> Case:
    transformers = pytest.importorskip("transformers")
    config = transformers.ViTConfig(
        num_hidden_layers=1, hidden_size=WIDTH, num_attention_heads=HEADS, intermediate_size=32,
        image_size=4, patch_size=2, num_channels=1, num_labels=5, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    x = torch.randn(3, 1, 4, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    return _case(
        transformers.ViTForImageClassification(config),
        x,
        "vit.embeddings.patch_embeddings.projection",
    )


BUILDERS = {"gpt": _zoo_gpt, "vit": _zoo_vit, "hf_gpt2": _hf_gpt2, "hf_vit": _hf_vit}


@pytest.fixture(scope="module")
def cases() -> dict[str, Case]:
    return {}


def _get(cases: dict[str, Case], name: str) -> Case:
    if name not in cases:
        cases[name] = BUILDERS[name]()
    return cases[name]


def _out(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        y = model(x)
    return y if isinstance(y, torch.Tensor) else y.logits


def _stream_group(case: Case) -> str:
    (group,) = [g for g, k in case.spec.kinds.items() if k == "orthogonal"]
    return group


@pytest.mark.parametrize("name", sorted(BUILDERS))
@pytest.mark.parametrize("kind", ["permutation", "orthogonal", "invertible"])
def test_random_element_of_each_kind_keeps_the_function(cases, name: str, kind: str) -> None:
    case = _get(cases, name)
    alignment = random_alignment(case.spec, seed=4, kind=kind)
    state = case.model.state_dict()
    moved = alignment.apply(case.spec, state)
    model = canonicalize(case.model)
    model.load_state_dict(moved)
    y = _out(case.model, case.x)
    assert torch.allclose(_out(model, case.x), y, rtol=0, atol=1e-5 * float(y.abs().max()))
    # the transform is not the identity: every transformed weight moved
    assert all(not torch.allclose(moved[n], state[n]) for n in case.spec.spec.permuted_names)
    # each group got min(kind, what it admits); the stream and the nested groups are lifted
    want = {g: KINDS[min(kind_rank(kind), kind_rank(k))] for g, k in case.spec.kinds.items()}
    assert alignment.kinds == want
    assert want[case.stream] == ("permutation" if kind == "permutation" else "orthogonal")
    back = alignment.inverse().apply(case.spec, moved)
    assert all(torch.allclose(back[n], state[n], rtol=0, atol=1e-12) for n in state)


@pytest.mark.parametrize("name", ["gpt", "vit", "hf_gpt2"])
def test_kinds_and_roles_of_a_canonical_transformer(cases, name: str) -> None:
    case = _get(cases, name)
    spec = case.spec
    stream = _stream_group(case)
    nested = set(spec.heads)
    assert len(nested) == 4  # q/k and v/o in each of two blocks
    assert {g for g, k in spec.kinds.items() if k == "invertible"} == nested
    assert all(k == "permutation" for g, k in spec.kinds.items() if g not in nested | {stream})
    assert stream == case.stream
    # q/k: one side covariant ("out"), the other contravariant ("in"); v rows out, o columns in
    for group in nested:
        roles = [
            spec.role(n, a, k)
            for n, a in spec.spec.groups[group]
            for k, seg in enumerate(spec.spec[n][a])
            if seg.perm == group
        ]
        assert roles.count("in") >= 1 and roles.count("out") >= 1


def test_roles_of_layers() -> None:
    model = build("gpt", vocab=11, context=6, width=WIDTH, depth=1, heads=HEADS, tied=False)
    assert layer_role(model, "blocks.0.attn.qkv.weight", 0) == "out"
    assert layer_role(model, "blocks.0.attn.qkv.weight", 1) == "in"
    assert layer_role(model, "blocks.0.attn.qkv.bias", 0) == "out"
    assert layer_role(model, "tok.weight", 1) == "out"
    assert layer_role(model, "blocks.0.norm1.weight", 0) == "norm"
    x = torch.randint(0, 11, (2, 6))
    spec = symmetry_spec(model, x)
    (qk,) = [g for g in spec.heads if spec.spec.groups[g][0][0].endswith("qkv.weight")
             and len(spec.spec.groups[g]) == 2]  # fmt: skip
    # the fused qkv weight holds q then k then v along its rows: q out, k in
    entry = spec.spec["blocks.0.attn.qkv.weight"][0]
    roles = spec.roles[("blocks.0.attn.qkv.weight", 0)]
    assert [r for s, r in zip(entry, roles) if s.perm == qk] == ["out", "in"]


def test_stream_with_layernorms_admits_permutations_only() -> None:
    model = build("vit", in_channels=1, image_size=4, num_classes=5, width=WIDTH, depth=1,
                  heads=HEADS, patch=2)  # fmt: skip
    x = torch.randn(2, 1, 4, 4)
    spec = symmetry_spec(model, x)
    assert "orthogonal" not in spec.kinds.values()
    assert spec.role("blocks.0.norm1.weight", 0, 0) == "norm"
    canon = symmetry_spec(canonicalize(model), x)
    assert canon.kinds["patch_embed"] == "orthogonal"
    transforms = dict(random_alignment(spec, 0, "invertible"))
    transforms["patch_embed"] = Orthogonal.random(WIDTH, 0)
    with pytest.raises(LmcError, match="admits permutation maps at most"):
        Alignment(transforms).apply(spec, model.state_dict())


def test_random_permutation_alignment_is_random_permutation(cases) -> None:
    case = _get(cases, "gpt")
    got = random_alignment(case.spec, 9, "permutation").to_permutation()
    want = random_permutation(case.spec.spec, 9)
    assert got.keys() == want.keys() and all(torch.equal(got[g], want[g]) for g in want)
