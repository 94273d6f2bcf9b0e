"""Symmetries beyond permutations on transformers of every make (issue 42 items 1-2), float32.

For Hugging Face ``LlamaForCausalLM`` (with and without grouped-query attention, tied and
untied), the zoo's llama, gpt and vit, a pre-LN encoder on ``nn.MultiheadAttention`` (batch
first or not), hand-written attention LMs (fused and separate q/k/v, their own norm classes)
and Hugging Face GPT-2, all read off the traced graph:

- the canonical form keeps the function (1e-5 relative);
- a random element of every admissible group keeps the canonical model's function (1e-5): the
  stream's rotation, invertible maps within heads, and under RoPE one rotation and scaling per
  frequency plane on q with its inverse transpose on k; grouped-query attention's maps shared
  by the query heads of a key/value head;
- ``orthogonal`` weight matching recovers a known stream rotation combined with permutations
  of everything else (the aligned B equals A to 1e-5);
- the learned parametrisation (rotations, invertible maps, per-plane rotation and scaling)
  keeps B's function for any parameters, and ``learned`` alignment keeps B's function.
"""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lmc.models import build
from lmc.models.factory import HFLogits
from lmc.perm import (
    Alignment,
    Orthogonal,
    canonicalize,
    learned_alignment,
    orthogonal_weight_matching,
    random_alignment,
    symmetry_spec,
)
from lmc.perm.learned import _apply_rotations, _rotations, learnable_groups
from lmc.perm.transforms import RopePlanes

VOCAB, T, WIDTH = 40, 6, 16
TOL = 1e-5


# ---- models ----------------------------------------------------------------------------------
class MHAEncoderLM(nn.Module):
    """Token + learned position embeddings, pre-LN blocks on ``nn.MultiheadAttention`` (causal
    mask), GELU MLP, final LayerNorm, head."""

    def __init__(self, batch_first: bool) -> None:
        super().__init__()
        self.batch_first = batch_first
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Parameter(torch.randn(1, T, WIDTH) * 0.1)
        self.ln1 = nn.ModuleList(nn.LayerNorm(WIDTH) for _ in range(2))
        self.attn = nn.ModuleList(
            nn.MultiheadAttention(WIDTH, 4, batch_first=batch_first) for _ in range(2)
        )
        self.ln2 = nn.ModuleList(nn.LayerNorm(WIDTH) for _ in range(2))
        self.fc1 = nn.ModuleList(nn.Linear(WIDTH, 24) for _ in range(2))
        self.fc2 = nn.ModuleList(nn.Linear(24, WIDTH) for _ in range(2))
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)
        self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos
        if not self.batch_first:
            x = x.transpose(0, 1)
        for i in range(2):
            h = self.ln1[i](x)
            x = x + self.attn[i](h, h, h, attn_mask=self.mask, need_weights=False)[0]
            x = x + self.fc2[i](F.gelu(self.fc1[i](self.ln2[i](x))))
        if not self.batch_first:
            x = x.transpose(0, 1)
        return self.head(self.norm(x))


class OwnRMSNorm(nn.Module):
    """A user's RMSNorm (inlined by torch.fx: recognised by what it computes)."""

    def __init__(self, width: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.scale


class HandLM(nn.Module):
    """A hand-written causal LM: fused qkv (cut with ``split``) and its own RMSNorm class, or
    separate q/k/v and ``nn.LayerNorm`` without bias; a tied head."""

    def __init__(self, fused: bool, heads: int = 4) -> None:
        super().__init__()
        self.fused, self.heads = fused, heads
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Embedding(T, WIDTH)
        norm = (lambda: OwnRMSNorm(WIDTH)) if fused else (lambda: nn.LayerNorm(WIDTH, bias=False))
        self.n1 = nn.ModuleList(norm() for _ in range(2))
        self.n2 = nn.ModuleList(norm() for _ in range(2))
        if fused:
            self.qkv = nn.ModuleList(nn.Linear(WIDTH, 3 * WIDTH) for _ in range(2))
        else:
            self.q = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(2))
            self.k = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(2))
            self.v = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(2))
        self.o = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(2))
        self.up = nn.ModuleList(nn.Linear(WIDTH, 32) for _ in range(2))
        self.down = nn.ModuleList(nn.Linear(32, WIDTH) for _ in range(2))
        self.norm = norm()
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.tok.weight

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        n, length, _ = t.shape
        return t.view(n, length, self.heads, WIDTH // self.heads).transpose(1, 2)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        n, length = idx.shape
        x = self.tok(idx) + self.pos(torch.arange(length, device=idx.device))
        for i in range(2):
            h = self.n1[i](x)
            if self.fused:
                q, k, v = self.qkv[i](h).split(WIDTH, dim=-1)
            else:
                q, k, v = self.q[i](h), self.k[i](h), self.v[i](h)
            y = F.scaled_dot_product_attention(
                self._heads(q), self._heads(k), self._heads(v), is_causal=True
            )
            x = x + self.o[i](y.transpose(1, 2).reshape(n, length, WIDTH))
            x = x + self.down[i](F.relu(self.up[i](self.n2[i](x))))
        return self.head(self.norm(x))


def _hf_llama(kv_heads: int, tied: bool):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=24, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=T,
        tie_word_embeddings=tied,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config)


def _hf_gpt2():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=2, n_embd=WIDTH, n_head=4, n_inner=32, vocab_size=VOCAB, n_positions=T,
        attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0,
    )  # fmt: skip
    return transformers.GPT2LMHeadModel(config)


def _tokens(n: int = 3, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (n, T), generator=torch.Generator().manual_seed(seed))


MODELS = {
    "hf_llama": lambda: (_hf_llama(4, False), _tokens()),
    "hf_llama_gqa": lambda: (_hf_llama(2, False), _tokens()),
    "hf_llama_gqa_tied": lambda: (HFLogits(_hf_llama(2, True)), _tokens()),  # as the CLI wraps
    "llama": lambda: (build("llama", vocab=VOCAB, context=T, width=WIDTH, depth=2, heads=4),
                      _tokens()),
    "llama_gqa_tied": lambda: (build("llama", vocab=VOCAB, context=T, width=WIDTH, depth=2,
                                     heads=4, kv_heads=2, tied=True), _tokens()),
    "gpt": lambda: (build("gpt", vocab=VOCAB, context=T, width=WIDTH, depth=2, heads=4),
                    _tokens()),
    "vit": lambda: (build("vit", in_channels=1, image_size=8, num_classes=5, width=WIDTH,
                          depth=2, heads=4, patch=2),
                    torch.randn(3, 1, 8, 8, generator=torch.Generator().manual_seed(1))),
    "mha_batch_first": lambda: (MHAEncoderLM(True), _tokens()),
    "mha_seq_first": lambda: (MHAEncoderLM(False), _tokens()),
    "hand_fused": lambda: (HandLM(True), _tokens()),
    "hand_separate": lambda: (HandLM(False), _tokens()),
    "hf_gpt2": lambda: (_hf_gpt2(), _tokens()),
}  # fmt: skip


def _perturbed(model: nn.Module, seed: int) -> nn.Module:
    """Every parameter moved by seeded noise (gains away from 1, biases away from 0)."""
    gen = torch.Generator().manual_seed(seed)
    model = model.float().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=gen) / math.sqrt(max(p.shape[-1], 1)))
            if p.dim() == 1:
                p.add_(0.2 * torch.randn(p.shape, generator=gen))
    return model


def _out(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        y = model(x)
    return y if isinstance(y, torch.Tensor) else y.logits


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def _loaded(model: nn.Module, state) -> nn.Module:
    out = copy.deepcopy(model)
    out.load_state_dict(state)
    return out


@pytest.fixture(scope="module")
def cases():
    """name -> (model, input, canonical model, its symmetry spec), built once."""
    made = {}

    def get(name: str):
        if name not in made:
            model, x = MODELS[name]()
            model = _perturbed(model, 0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                canon = canonicalize(model, x[:2])
                sym = symmetry_spec(canon, x[:2])
            made[name] = (model, x, canon, sym)
        return made[name]

    return get


@pytest.mark.parametrize("name", sorted(MODELS))
def test_canonical_form_and_random_symmetries_keep_the_function(cases, name):
    model, x, canon, sym = cases(name)
    y = _out(model, x)
    assert _rel(_out(canon, x), y) < TOL
    stream = [g for g, k in sym.kinds.items() if k == "orthogonal"]
    assert len(stream) == 1 and sym.group_sizes[stream[0]] == WIDTH
    for kind in ("orthogonal", "invertible"):
        alignment = random_alignment(sym, 7, kind)
        moved = _loaded(canon, alignment.apply(sym, canon.state_dict()))
        assert _rel(_out(moved, x), y) < TOL, kind
        assert any(t.kind != "permutation" for t in alignment.values())


@pytest.mark.parametrize("name", ["hf_llama", "hf_llama_gqa_tied", "llama", "llama_gqa_tied"])
def test_llama_groups(cases, name):
    """RoPE restricts q/k within heads to per-plane rotations and scalings; with grouped-query
    attention the v/o maps of a key/value head are shared by its query heads; gate and up
    share one unit permutation; the RMSNorm gains are folded (the canonical norms have none)."""
    model, x, canon, sym = cases(name)
    gqa = "gqa" in name
    layers = 2
    rope = [g for g, w in sym.within.items() if w.kind == "rope"]
    assert len(rope) == layers
    shared = [g for g, w in sym.within.items() if w.kind == "invertible"]
    assert len(shared) == (layers if gqa else 0)
    for g in shared:
        # v rows once, the output projection's columns once per query head
        assert {m.tiles for m in sym.within[g].members} == {1, 2}
    pspec = sym.spec
    gate = next(n for n in pspec.axes if n.endswith(("gate_proj.weight", "gate.weight")))
    up = gate.replace("gate", "up")
    assert pspec[gate][0][0].perm == pspec[up][0][0].perm
    assert not any(k.endswith("norm.weight") or "layernorm" in k for k in canon.state_dict())
    # a per-plane rotation and scaling is no general invertible map: those are refused there
    g = rope[0]
    w = sym.within[g]
    base = random_alignment(sym, 1, "permutation")
    head = base[w.head].perm
    ok = Alignment({**base, g: RopePlanes.random(w.size, 3, heads=w.heads, head=head)})
    ok.check(sym)
    from lmc.config import LmcError
    from lmc.perm import Invertible

    bad = Alignment({**base, g: Invertible.random(w.size, 3, heads=w.heads, head=head)})
    with pytest.raises(LmcError, match="rotation and scaling per frequency plane"):
        bad.check(sym)


def _known_rotation(sym, seed: int) -> Alignment:
    """A Haar-random rotation of the stream with random permutations of everything else."""
    perms = random_alignment(sym, seed, "permutation")
    (stream,) = [g for g, k in sym.kinds.items() if k == "orthogonal"]
    return Alignment({**perms, stream: Orthogonal.random(sym.group_sizes[stream], seed + 1)})


@pytest.mark.parametrize("name", sorted(MODELS))
def test_orthogonal_matching_recovers_a_stream_rotation_with_permutations(cases, name):
    model, x, canon, sym = cases(name)
    state_a = canon.state_dict()
    state_b = _known_rotation(sym, 11).apply(sym, state_a)
    found = orthogonal_weight_matching(sym, state_a, state_b, max_iter=30)
    aligned = found.alignment.apply(sym, state_b)
    for k, v in state_a.items():
        if v.is_floating_point():
            assert float((aligned[k] - v).abs().max()) <= TOL * max(1.0, float(v.abs().max())), k
    assert _rel(_out(_loaded(canon, aligned), x), _out(model, x)) < TOL


@pytest.mark.parametrize("name", ["hf_llama_gqa_tied", "llama", "hand_fused", "mha_seq_first"])
@pytest.mark.parametrize("head_maps", ["orthogonal", "invertible"])
def test_the_learned_parametrisation_keeps_the_function_for_any_parameters(cases, name, head_maps):
    model, x, canon, sym = cases(name)
    groups = learnable_groups(sym, heads=True)
    assert any(g in sym.within for g in groups) == name.startswith(("hf_llama", "llama"))
    sizes = {**sym.group_sizes, **{g: w.size for g, w in sym.within.items()}}
    gen = torch.Generator().manual_seed(5)
    planes = {g: RopePlanes for g in groups if g in sym.within and sym.within[g].kind == "rope"}
    invertible = frozenset(
        g for g in groups if head_maps == "invertible" and (g in sym.spec.heads or g in sym.within)
    )
    params = {}
    for g, h in groups.items():
        d = sizes[g] // h
        shape = (h, 2, d // 2) if g in planes else (h, d, d)
        params[g] = 0.3 * torch.randn(shape, generator=gen, dtype=torch.float64)
    rotations = _rotations(params, invertible, planes)
    state = {k: v.double() for k, v in canon.state_dict().items()}
    moved = _apply_rotations(sym, state, rotations)
    out = _loaded(canon.double(), moved)
    assert _rel(_out(out, x), _out(canon.double(), x)) < 1e-10
    canon.float()


@pytest.mark.parametrize("name", ["hf_llama_gqa_tied", "llama"])
@pytest.mark.parametrize("head_maps", ["orthogonal", "invertible"])
def test_learned_alignment_keeps_b_function(cases, name, head_maps):
    model, x, canon, sym = cases(name)
    other = _perturbed(copy.deepcopy(model), 1)
    canon_b = canonicalize(other, x[:2])
    inputs = torch.randint(0, VOCAB, (24, T), generator=torch.Generator().manual_seed(3))
    labels = torch.roll(inputs, -1, dims=1)
    result = learned_alignment(
        sym, canon, canon_b, inputs, labels, steps=4, lr=0.05, batch_size=8, holdout=8,
        eval_every=1, head_maps=head_maps, task="next-token",
    )  # fmt: skip
    kinds = result.alignment.kinds
    assert any(kinds[g] == "rope" for g in sym.within if sym.within[g].kind == "rope")
    aligned = _loaded(canon_b, result.alignment.apply(sym, canon_b.state_dict()))
    assert _rel(_out(aligned, x), _out(other, x)) < TOL
    assert result.best_loss <= result.initial_loss
