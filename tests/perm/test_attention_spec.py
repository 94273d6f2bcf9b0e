"""Attention in derived specs: heads, q/k and v/o dims nested in them, proven by function
preservation (a random permutation of the derived spec leaves the outputs unchanged)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from lmc.config import LmcError
from lmc.perm import (
    PermutationSpec,
    apply_permutation,
    check_permutation,
    moved_fraction,
    random_permutation,
    spec_from_model,
)
from lmc.perm.heads import compose_heads, split_heads


def _x(seed: int = 0) -> torch.Tensor:
    return torch.randn(3, 7, 5, generator=torch.Generator().manual_seed(seed))


def _attn(models, kind: str):
    A = models
    return {
        "hand_sdpa": lambda d, h: A.HandAttention(d, h),
        "hand_softmax": lambda d, h: A.HandAttention(d, h, kind="softmax"),
        "fused_split": lambda d, h: A.HandAttention(d, h, qkv="split"),
        "fused_chunk": lambda d, h: A.HandAttention(d, h, qkv="chunk", kind="softmax"),
        "fused_view": lambda d, h: A.HandAttention(d, h, qkv="view"),
        "fused_timm": lambda d, h: A.HandAttention(d, h, qkv="timm", kind="softmax"),
        "mha_batch_first": lambda d, h: A.MHAAttention(d, h, True, True),
        "mha_seq_first_no_bias": lambda d, h: A.MHAAttention(d, h, False, False),
        "mha_separate_qkv": lambda d, h: A.MHAAttention(d, h, True, True, separate=True),
        "rope": lambda d, h: A.HandAttention(d, h, rope=True),
    }[kind]


def preserved(model, spec: PermutationSpec, seed: int = 0) -> dict[str, torch.Tensor]:
    a = copy.deepcopy(model).double().eval()
    perm = random_permutation(spec, seed)
    b = copy.deepcopy(a)
    b.load_state_dict(apply_permutation(spec, perm, a.state_dict()))
    x = _x(seed).double()
    with torch.no_grad():
        ya, yb = a(x), b(x)
    assert float((ya - yb).norm() / ya.norm()) < 1e-5
    return perm


KINDS = [
    "hand_sdpa",
    "hand_softmax",
    "fused_split",
    "fused_chunk",
    "fused_view",
    "fused_timm",
    "mha_batch_first",
    "mha_seq_first_no_bias",
    "mha_separate_qkv",
]


@pytest.mark.parametrize("kind", KINDS)
def test_every_group_moves_and_the_function_is_kept(attention_models, kind):
    torch.manual_seed(0)
    model = attention_models.TinyTransformer(_attn(attention_models, kind))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # everything is understood: no warning
        spec = spec_from_model(model, _x()[:2])
    heads = spec.heads
    # per block: one head group with two nested groups (q/k and v/o), 4 heads of 4 dims
    head_groups = {h for h, _ in heads.values()}
    assert len(head_groups) == 2 and len(heads) == 4
    assert all(n == 4 and spec.group_sizes[g] == 16 for g, (_, n) in heads.items())
    # the residual stream: embedding, class token, positional embedding, every LayerNorm,
    # every block's input and output projection share one permutation
    resid = spec["embed.weight"][0][0].perm
    assert spec["cls"][2][0].perm == spec["pos"][2][0].perm == resid
    assert spec["ln.weight"][0][0].perm == spec["head.weight"][1][0].perm == resid
    for b in range(2):
        assert spec[f"blocks.{b}.ln1.weight"][0][0].perm == resid
        assert spec[f"blocks.{b}.fc2.weight"][0][0].perm == resid
        assert spec[f"blocks.{b}.fc1.weight"][0][0].perm == f"blocks.{b}.fc1"
    perm = preserved(model, spec, seed=3)
    moved = moved_fraction(perm)
    assert all(f > 0 for f in moved.values()), moved
    for g, (h, n) in heads.items():
        head, within = split_heads(perm[g], n)
        assert torch.equal(head, perm[h])


def test_mha_binds_fused_in_projection_q_k_v_blocks(attention_models):
    model = attention_models.TinyTransformer(_attn(attention_models, "mha_batch_first"))
    spec = spec_from_model(model, _x()[:2])
    rows = spec["blocks.0.attn.mha.in_proj_weight"][0]
    assert [s.perm for s in rows] == ["blocks.0.attn.mha.qk"] * 2 + ["blocks.0.attn.mha.vo"]
    assert spec["blocks.0.attn.mha.out_proj.weight"][1][0].perm == "blocks.0.attn.mha.vo"
    assert spec.heads["blocks.0.attn.mha.vo"] == ("blocks.0.attn.mha.heads", 4)


def test_rope_leaves_within_head_qk_dims_unpermuted_with_a_warning(attention_models):
    model = attention_models.TinyTransformer(_attn(attention_models, "rope"))
    with pytest.warns(UserWarning, match="position-dependent map"):
        spec = spec_from_model(model, _x()[:2])
    q = spec["blocks.0.attn.q.weight"][0]
    v = spec["blocks.0.attn.v.weight"][0]
    # q (and k) rows move as whole heads (4 units of 4 rows); v keeps its nested permutation
    assert len(q) == 1 and (q[0].size, q[0].repeat) == (4, 4)
    assert q[0].perm == spec.heads[v[0].perm][0]
    perm = preserved(model, spec, seed=1)
    assert all(f > 0 for f in moved_fraction(perm).values())


def test_head_permutations_must_be_block_structured():
    spec = PermutationSpec.from_dict(
        {"w": ("G", None), "o": (None, "G")}, {"w": (6, 2), "o": (2, 6)}, heads={"G": ("H", 3)}
    )
    assert spec.group_sizes == {"G": 6, "H": 3}
    perm = random_permutation(spec, 0)
    check_permutation(spec, perm)
    good = compose_heads(torch.tensor([2, 0, 1]), torch.tensor([[1, 0], [0, 1], [1, 0]]))
    assert good.tolist() == [5, 4, 0, 1, 3, 2]
    check_permutation(spec, {"G": good, "H": torch.tensor([2, 0, 1])})
    with pytest.raises(LmcError, match="block-structured"):
        check_permutation(spec, {"G": good, "H": torch.tensor([0, 2, 1])})
    with pytest.raises(LmcError, match="block-structured"):  # dims from two heads
        check_permutation(spec, {"G": torch.tensor([0, 2, 1, 3, 4, 5]), "H": torch.arange(3)})
    with pytest.raises(LmcError, match="multiple of 4"):
        PermutationSpec.from_dict({"w": ("G", None)}, {"w": (6, 2)}, heads={"G": ("H", 4)})


class _OddStack(torch.nn.Module):
    """A fused projection viewed as (B, T, 3, C) and sliced across its pieces: not a piece
    selection, so its groups must stay unpermuted (with a warning), the function kept."""

    def __init__(self, heads: bool) -> None:
        super().__init__()
        self.heads = heads
        self.embed = torch.nn.Linear(5, 8)
        self.qkv = torch.nn.Linear(8, 24)
        self.out = torch.nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        shape = (b, n, 3, 2, 4) if self.heads else (b, n, 3, 8)
        stack = self.qkv(torch.relu(self.embed(x))).view(*shape)
        first_two = stack[:, :, :2].reshape(b, n, 16)
        return self.out(torch.relu(first_two)).mean(1)


@pytest.mark.parametrize("heads, message", [(True, "stack of fused pieces"), (False, "heads")])
def test_a_fused_view_sliced_across_its_pieces_is_left_unpermuted_with_a_warning(heads, message):
    """Viewed as (B, T, 3, H, d) the pieces are a stack; as (B, T, 3, C) the view reads as 3
    heads of C dims, and slicing them freezes them as well."""
    torch.manual_seed(0)
    model = _OddStack(heads)
    with pytest.warns(UserWarning, match=message):
        spec = spec_from_model(model, _x()[:2])
    assert spec["qkv.weight"][0] is None or all(s.perm is None for s in spec["qkv.weight"][0])
    preserved(model, spec, seed=1)
