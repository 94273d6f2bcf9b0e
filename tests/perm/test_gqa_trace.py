"""Grouped-query attention in the traced spec (issue 46): the query heads that share a
key/value head move with it, whether the key/value heads are repeated by ``repeat_kv``
(``x[:, :, None].expand(...).reshape(...)``, Hugging Face's), by ``repeat_interleave``, or
inside ``F.scaled_dot_product_attention(..., enable_gqa=True)``. The kv-head permutation
indexes q's rows and o's columns in blocks of ``heads / kv_heads`` heads; the v/o dims within
heads, which o reads once per query head, stay in place. A random element keeps the function.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lmc.perm import apply_permutation, random_permutation, spec_from_model
from lmc.perm.trace.state import Seg, TraceState

WIDTH, HEADS, KV, VOCAB, T = 24, 6, 2, 11, 5
D = WIDTH // HEADS
REP = HEADS // KV


class GQALM(nn.Module):
    """Embedding -> GQA self-attention (no RoPE) + residual -> ReLU MLP + residual -> head."""

    def __init__(self, repeat: str) -> None:
        super().__init__()
        self.repeat = repeat
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.q = nn.Linear(WIDTH, HEADS * D)
        self.k = nn.Linear(WIDTH, KV * D)
        self.v = nn.Linear(WIDTH, KV * D)
        self.o = nn.Linear(HEADS * D, WIDTH)
        self.fc1, self.fc2 = nn.Linear(WIDTH, 40), nn.Linear(40, WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)

    def _kv(self, t: torch.Tensor) -> torch.Tensor:
        n, kv, length, d = t.shape
        if self.repeat == "expand":
            return t[:, :, None, :, :].expand(n, kv, REP, length, d).reshape(n, HEADS, length, d)
        return t.repeat_interleave(REP, dim=1)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx)
        n, length = x.shape[0], x.shape[1]
        q = self.q(x).view(n, length, HEADS, D).transpose(1, 2)
        k = self.k(x).view(n, length, KV, D).transpose(1, 2)
        v = self.v(x).view(n, length, KV, D).transpose(1, 2)
        if self.repeat == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            y = F.scaled_dot_product_attention(q, self._kv(k), self._kv(v), is_causal=True)
        x = x + self.o(y.transpose(1, 2).reshape(n, length, WIDTH))
        x = x + self.fc2(torch.relu(self.fc1(x)))
        return self.head(x)


def _groups(spec, name: str, axis: int) -> list[tuple[str | None, int]]:
    entry = spec[name][axis]
    return [] if entry is None else [(s.perm, s.repeat) for s in entry]


def _moving(spec, heads: str) -> dict[str, torch.Tensor]:
    """The first random permutation (seeds 0, 1, ...) that swaps the key/value heads."""
    for seed in range(100):
        perm = random_permutation(spec, seed)
        if not torch.equal(perm[heads], torch.arange(spec.group_sizes[heads])):
            return perm
    raise AssertionError("no seed moves the heads")


@pytest.mark.parametrize("repeat", ["expand", "interleave", "sdpa"])
def test_query_heads_move_with_their_key_value_head(repeat):
    torch.manual_seed(0)
    model = GQALM(repeat).eval()
    x = torch.randint(0, VOCAB, (8, T), generator=torch.Generator().manual_seed(1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spec = spec_from_model(model, x[:2])
    messages = [str(w.message) for w in caught]
    assert messages and all("dims within each attention head stay" in m for m in messages)
    ((heads, _),) = _groups(spec, "k.weight", 0)
    assert spec.group_sizes[heads] == KV
    assert _groups(spec, "k.weight", 0) == _groups(spec, "v.weight", 0) == [(heads, D)]
    assert _groups(spec, "q.weight", 0) == _groups(spec, "q.bias", 0) == [(heads, REP * D)]
    assert _groups(spec, "o.weight", 1) == [(heads, REP * D)]
    ((stream, _),) = _groups(spec, "tok.weight", 1)
    ((hidden, _),) = _groups(spec, "fc1.weight", 0)
    assert set(spec.group_sizes) == {stream, hidden, heads} and not spec.heads
    perm = _moving(spec, heads)
    permuted = copy.deepcopy(model)
    permuted.load_state_dict(apply_permutation(spec, perm, model.state_dict()))
    assert not torch.equal(permuted.q.weight, model.q.weight)
    with torch.no_grad():
        ya, yb = model(x), permuted(x)
    assert float((ya - yb).norm() / ya.norm()) < 1e-5


def test_unify_moves_the_finer_units_in_blocks_of_the_coarser():
    """Seg(A, 6 units, 1 wide) on one axis with Seg(B, 2 units, 3 wide): A's units move in
    blocks of 3, as B's; sizes that do not divide still freeze both."""
    st = TraceState.__new__(TraceState)
    from lmc.perm.trace.state import UnionFind

    st.uf = UnionFind()
    a, b = st.uf.new(6, "a"), st.uf.new(2, "b")
    assert st.unify((Seg(a, 6, 1),), (Seg(b, 2, 3),))
    blocks, factor = st.uf.coarse[st.uf.find(a)]
    assert factor == 3 and st.uf.find(blocks) == st.uf.find(b)
    assert not st.uf.is_frozen(a) and not st.uf.is_frozen(b)
    st.uf.freeze(a)  # the blocks cannot move when the units must stay
    assert st.uf.is_frozen(b)
    c, d = st.uf.new(6, "c"), st.uf.new(4, "d")
    assert not st.unify((Seg(c, 6, 2),), (Seg(d, 4, 3),))
    assert st.uf.is_frozen(c) and st.uf.is_frozen(d)


def test_hugging_face_llama_with_grouped_query_attention():
    """``LlamaForCausalLM`` (exported graph) with 4 query heads over 2 key/value heads."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=T,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # RMSNorm gains start at 1: make their order matter
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    x = torch.randint(0, VOCAB, (4, T), generator=torch.Generator().manual_seed(1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = spec_from_model(model, x[:2])
    attn = "model.layers.0.self_attn"
    ((heads, _),) = _groups(spec, f"{attn}.k_proj.weight", 0)
    assert spec.group_sizes[heads] == 2
    assert _groups(spec, f"{attn}.q_proj.weight", 0) == [(heads, 2 * 4)]
    assert _groups(spec, f"{attn}.o_proj.weight", 1) == [(heads, 2 * 4)]
    perm = _moving(spec, heads)
    permuted = copy.deepcopy(model)
    permuted.load_state_dict(apply_permutation(spec, perm, model.state_dict()))
    with torch.no_grad():
        ya, yb = model(x).logits, permuted(x).logits
    assert float((ya - yb).norm() / ya.norm()) < 1e-5
