"""Symmetries beyond permutations on transformers lmc was not written for (issue 42, acceptance:
"checked on transformers you have not seen"), each built from a tiny config, float32, eval.

Each model either works -- the canonical form keeps the function (1e-5 relative), a random
element of every admissible group keeps it, and ``orthogonal`` alignment against a copy moved
by a known stream rotation with permutations elsewhere recovers the copy (B aligned equals A) --
or is refused with one ``LmcError`` naming the module and why, while plain permutations keep its
function and weight matching undoes them.

The ones that work exercise: Gemma's RMSNorm gain stored as ``w`` and applied as ``1 + w`` and
its embeddings scaled by a number (the tracer binds ``1 + w`` as ``w``; the stream may be scaled
by numbers); Falcon's layers computing ``x @ W.T`` (a transposed weight is a dense layer);
DINOv2's layer scales (a module per branch) and a CaiT-style one (a parameter of the block),
folded into the layer that writes the branch, and DINOv2's classifier reading the class token
and the mean-pooled tokens side by side; Bloom's norm of the embedding lookup, folded into the
table's rows; the heads of fused q/k/v projections -- GPT-NeoX's, interleaved per head, and
Phi-3's, cut apart by slicing -- with their maps within heads; multi-query attention (one
key/value head, a head group of one unit: Falcon's default, GPTBigCode's, a Llama with one
key/value head, lmc's own llama, and hand-written ones) with one map within it per layer shared
by every query head; Qwen3's q/k norms per head, under which whole heads move and v/o keep
their maps but no q/k map is offered; interleaved rotary embeddings (GPT-J's and CodeGen's
``rotate_every_two``, Cohere's, a hand-written one: ``torch.stack`` of slices of the dims within
heads) under which whole heads move and q/k take one rotation and scaling per plane of dims
``2p`` and ``2p + 1``. The refused ones: norms after a
branch's output (OLMo 2), a model that returns its stream (no head), a mixture-of-experts router
the tracer does not follow, a per-feature scale of the stream itself (not of a branch), and
``nn.TransformerEncoderLayer``, whose fused inference path reads its norms' parameters itself
(traced through its layers now, so its permutations are found).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import warnings

import pytest
import torch
from torch import nn

from lmc.config import LmcError
from lmc.models import build
from lmc.perm import (
    Alignment,
    Orthogonal,
    align,
    apply_permutation,
    canonicalize,
    random_alignment,
    random_permutation,
    spec_from_model,
    symmetry_spec,
    weight_matching,
)

transformers = pytest.importorskip("transformers")

VOCAB, T, WIDTH, HEADS = 40, 6, 32, 4
TOL = 1e-5


def _tokens(n: int = 3) -> torch.Tensor:
    return torch.randint(0, VOCAB, (n, T), generator=torch.Generator().manual_seed(1))


def _decoder(config: str, model: str, **options):
    base = dict(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=2,
                num_attention_heads=HEADS, max_position_embeddings=T)  # fmt: skip
    return getattr(transformers, model)(getattr(transformers, config)(**base, **options))


class EncoderLayerLM(nn.Module):
    """Pre-LN blocks of ``nn.TransformerEncoderLayer(norm_first=True)``, a final LayerNorm and a
    head."""

    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Parameter(torch.randn(1, T, WIDTH) * 0.1)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(
                WIDTH, HEADS, 48, dropout=0.0, batch_first=True, norm_first=True
            )
            for _ in range(2)
        )
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, 5)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x).mean(1))


class ScaledBlockLM(nn.Module):
    """Pre-LN blocks with CaiT-style layer scales held by the block itself
    (``x + self.gamma_1 * attn(norm1(x))``); with ``stream_scale``, a per-feature scale of the
    stream itself after each block (no branch to fold it into)."""

    def __init__(self, stream_scale: bool = False) -> None:
        super().__init__()
        _pre_ln_lm(self, [_ScaledBlock(stream_scale) for _ in range(2)])

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return _pre_ln_forward(self, idx)


def _pre_ln_lm(model: nn.Module, blocks: list[nn.Module]) -> None:
    """Give ``model`` a token embedding, ``blocks``, a final LayerNorm and a head."""
    model.tok = nn.Embedding(VOCAB, WIDTH)
    model.blocks = nn.ModuleList(blocks)
    model.norm = nn.LayerNorm(WIDTH)
    model.head = nn.Linear(WIDTH, VOCAB)


def _pre_ln_forward(model: nn.Module, idx: torch.Tensor) -> torch.Tensor:
    x = model.tok(idx)
    for block in model.blocks:
        x = block(x)
    return model.head(model.norm(x))


class _ScaledBlock(nn.Module):
    def __init__(self, stream_scale: bool) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv, self.out = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.fc1, self.fc2 = nn.Linear(WIDTH, 48), nn.Linear(48, WIDTH)
        self.gamma_1 = nn.Parameter(torch.full((WIDTH,), 0.1))
        self.gamma_2 = nn.Parameter(torch.full((WIDTH,), 0.1))
        self.stream_scale = nn.Parameter(torch.ones(WIDTH)) if stream_scale else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.gamma_1 * self.out(y.transpose(1, 2).reshape(b, t, WIDTH))
        x = x + self.gamma_2 * self.fc2(torch.relu(self.fc1(self.norm2(x))))
        return x if self.stream_scale is None else x * self.stream_scale


def _dinov2() -> nn.Module:
    return transformers.Dinov2ForImageClassification(transformers.Dinov2Config(
        hidden_size=WIDTH, num_hidden_layers=2, num_attention_heads=HEADS, mlp_ratio=2,
        image_size=8, patch_size=4, num_channels=3, num_labels=5))  # fmt: skip


def _gpt_neox(rotary_pct: float) -> nn.Module:
    return transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(
        vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=HEADS, max_position_embeddings=T, rotary_pct=rotary_pct))  # fmt: skip


def _phi3(kv_heads: int) -> nn.Module:
    return _decoder("Phi3Config", "Phi3ForCausalLM", intermediate_size=48, pad_token_id=0,
                    num_key_value_heads=kv_heads)  # fmt: skip


def _qwen3(kv_heads: int) -> nn.Module:
    return _decoder("Qwen3Config", "Qwen3ForCausalLM", intermediate_size=48,
                    num_key_value_heads=kv_heads, head_dim=WIDTH // HEADS)  # fmt: skip


def _gpt_bigcode() -> nn.Module:
    """GPTBigCode with its default multi-query attention: ``c_attn`` gives q for every head and
    one k and one v, cut apart without a view into heads."""
    return transformers.GPTBigCodeForCausalLM(transformers.GPTBigCodeConfig(
        vocab_size=VOCAB, n_embd=WIDTH, n_layer=2, n_head=HEADS, n_positions=T, n_inner=48,
        multi_query=True, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))  # fmt: skip


class MultiQueryLM(nn.Module):
    """Pre-LN blocks of multi-query attention (one key/value head read by every query head, no
    rotary embeddings) written by hand, two ways: ``fused``, one layer giving q, k and v, k and
    v cut off it as ``(B, 1, T, d)`` without a view into heads (GPTBigCode's way) and read by
    ``F.scaled_dot_product_attention(..., enable_gqa=True)``; else separate layers, k and v
    viewed as one head (``k.view(B, T, 1, d)``) and repeated by ``repeat_interleave``."""

    def __init__(self, fused: bool) -> None:
        super().__init__()
        _pre_ln_lm(self, [_MultiQueryBlock(fused) for _ in range(2)])

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return _pre_ln_forward(self, idx)


def _add_output_and_mlp(block: nn.Module) -> None:
    """Give a block the attention's output projection and a two-layer MLP."""
    block.out = nn.Linear(WIDTH, WIDTH)
    block.fc1, block.fc2 = nn.Linear(WIDTH, 48), nn.Linear(48, WIDTH)


def _add_norms_qkv_output_and_mlp(block: nn.Module) -> None:
    """Give a block its two LayerNorms, separate q/k/v projections of all heads, the output
    projection and the MLP (:func:`_add_output_and_mlp`)."""
    block.norm1, block.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
    block.q, block.k, block.v = (nn.Linear(WIDTH, WIDTH) for _ in range(3))
    _add_output_and_mlp(block)


def _output_and_mlp(block: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The rest of a pre-LN block after its attention's heads ``y`` (B, H, T, d): the output
    projection added to the stream ``x``, then the MLP's branch."""
    b, t, _ = x.shape
    x = x + block.out(y.transpose(1, 2).reshape(b, t, WIDTH))
    return x + block.fc2(torch.relu(block.fc1(block.norm2(x))))


def _one_key_value_head(block: nn.Module, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """q (B, H, T, d) and the one key/value head's k and v (B, 1, T, d) from separate layers
    ``block.q``, ``block.k``, ``block.v``, k and v viewed as one head."""
    b, t, _ = h.shape
    d = WIDTH // HEADS
    q = block.q(h).view(b, t, HEADS, d).transpose(1, 2)
    k, v = (layer(h).view(b, t, 1, d).transpose(1, 2) for layer in (block.k, block.v))
    return q, k, v


class _MultiQueryBlock(nn.Module):
    def __init__(self, fused: bool) -> None:
        super().__init__()
        d = WIDTH // HEADS
        self.fused = fused
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        if fused:
            self.qkv = nn.Linear(WIDTH, WIDTH + 2 * d)
        else:
            self.q = nn.Linear(WIDTH, WIDTH)
            self.k, self.v = nn.Linear(WIDTH, d), nn.Linear(WIDTH, d)
        _add_output_and_mlp(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        d = WIDTH // HEADS
        h = self.norm1(x)
        attend = nn.functional.scaled_dot_product_attention
        if self.fused:
            q, k, v = self.qkv(h).unsqueeze(1).split([WIDTH, d, d], dim=3)
            q = q.view(b, t, HEADS, d).transpose(1, 2)
            y = attend(q, k, v, is_causal=True, enable_gqa=True)
        else:
            q, k, v = _one_key_value_head(self, h)
            y = attend(q, k.repeat_interleave(HEADS, dim=1), v.repeat_interleave(HEADS, dim=1),
                       is_causal=True)  # fmt: skip
        return _output_and_mlp(self, x, y)


class _GatedFalconBlock(nn.Module):
    """Falcon's multi-query split of one view of every head (``qkv.view(B, T, H + 2, d)
    .split([H, 1, 1])``) whose view is read again: a statistic per head of the view (the mean
    square of each head's dims) gates a layer, so the view's heads are not the split's alone."""

    def __init__(self) -> None:
        super().__init__()
        d = WIDTH // HEADS
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv, self.out = nn.Linear(WIDTH, WIDTH + 2 * d), nn.Linear(WIDTH, WIDTH)
        self.gate, self.proj = nn.Linear(WIDTH, HEADS + 2), nn.Linear(HEADS + 2, WIDTH)
        self.fc1, self.fc2 = nn.Linear(WIDTH, 48), nn.Linear(48, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.norm1(x)
        view = self.qkv(h).view(b, t, HEADS + 2, WIDTH // HEADS)
        q, k, v = (z.transpose(1, 2) for z in view.split([HEADS, 1, 1], dim=2))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.out(y.transpose(1, 2).reshape(b, t, WIDTH))
        x = x + self.proj(view.pow(2).mean(-1) * self.gate(h))
        return x + self.fc2(torch.relu(self.fc1(self.norm2(x))))


class _NoMapBlock(nn.Module):
    """Multi-query attention whose one key/value head admits no map within it: q and k each
    normalised over the head's dims (an RMSNorm without a gain, which no invertible map and
    no scaling of a rotary plane commutes with), v's dims scaled by a gain of their own."""

    def __init__(self) -> None:
        super().__init__()
        d = WIDTH // HEADS
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.q, self.k, self.v = nn.Linear(WIDTH, WIDTH), nn.Linear(WIDTH, d), nn.Linear(WIDTH, d)
        self.v_gain = nn.Parameter(torch.linspace(0.5, 1.5, d))
        _add_output_and_mlp(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = _one_key_value_head(self, self.norm1(x))
        q, k = (z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + 1e-6) for z in (q, k))
        y = nn.functional.scaled_dot_product_attention(q, k, v * self.v_gain, enable_gqa=True)
        return _output_and_mlp(self, x, y)


class _BroadcastBlock(_MultiQueryBlock):
    """Multi-query attention written with products that broadcast the one key/value head
    (``q @ k.transpose(-2, -1)`` with ``k`` of shape ``(B, 1, T, d)``), as older code does."""

    def __init__(self) -> None:
        super().__init__(fused=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = _one_key_value_head(self, self.norm1(x))
        y = ((q @ k.transpose(-2, -1)) / math.sqrt(WIDTH // HEADS)).softmax(-1) @ v
        return _output_and_mlp(self, x, y)


def _rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    """GPT-J's rotation by a quarter turn of each plane of dims ``2p`` and ``2p + 1``."""
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


class _InterleavedRopeBlock(nn.Module):
    """Attention under interleaved rotary embeddings written by hand (traced by ``torch.fx``):
    q and k rotated by ``x * cos + rotate_every_two(x) * sin``, sin and cos repeated for the
    two dims of each plane."""

    def __init__(self) -> None:
        super().__init__()
        d = WIDTH // HEADS
        _add_norms_qkv_output_and_mlp(self)
        angle = torch.arange(T)[:, None] * 100.0 ** (-torch.arange(0, d, 2) / d)
        self.register_buffer("cos", angle.cos().repeat_interleave(2, -1), persistent=False)
        self.register_buffer("sin", angle.sin().repeat_interleave(2, -1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.norm1(x)
        q, k, v = (z(h).view(b, t, HEADS, -1).transpose(1, 2) for z in (self.q, self.k, self.v))
        q, k = (z * self.cos + _rotate_every_two(z) * self.sin for z in (q, k))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return _output_and_mlp(self, x, y)


class _StackedQKBlock(nn.Module):
    """q and k split into heads stacked whole (``torch.stack((q, k))``) and taken apart again:
    a stack that is not of slices of the dims within heads."""

    def __init__(self) -> None:
        super().__init__()
        _add_norms_qkv_output_and_mlp(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.norm1(x)
        q, k, v = (z(h).view(b, t, HEADS, -1).transpose(1, 2) for z in (self.q, self.k, self.v))
        qk = torch.stack((q, k))
        y = nn.functional.scaled_dot_product_attention(qk[0], qk[1], v, is_causal=True)
        return _output_and_mlp(self, x, y)


class BlocksLM(nn.Module):
    """Token embedding, two blocks of ``block``, a final LayerNorm and a head."""

    def __init__(self, block: type[nn.Module]) -> None:
        super().__init__()
        _pre_ln_lm(self, [block() for _ in range(2)])

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return _pre_ln_forward(self, idx)


def _gptj(rotary_dim: int) -> nn.Module:
    """GPT-J, rotary embeddings on the first ``rotary_dim`` dims of each head (interleaved)."""
    return transformers.GPTJForCausalLM(transformers.GPTJConfig(
        vocab_size=VOCAB, n_embd=WIDTH, n_layer=2, n_head=HEADS, rotary_dim=rotary_dim,
        n_positions=T, bos_token_id=0, eos_token_id=0))  # fmt: skip


def _codegen() -> nn.Module:
    """CodeGen: one fused qkv projection viewed in blocks per head, interleaved rotary."""
    return transformers.CodeGenForCausalLM(transformers.CodeGenConfig(
        vocab_size=VOCAB, n_embd=WIDTH, n_layer=2, n_head=HEADS, rotary_dim=WIDTH // HEADS,
        n_positions=T, n_ctx=T, bos_token_id=0, eos_token_id=0))  # fmt: skip


def _cohere() -> nn.Module:
    """Cohere: grouped-query attention under interleaved rotary embeddings."""
    return _decoder("CohereConfig", "CohereForCausalLM", intermediate_size=48,
                    num_key_value_heads=2, bos_token_id=0, eos_token_id=0)  # fmt: skip


WORKS = {
    "gemma": lambda: _decoder("GemmaConfig", "GemmaForCausalLM", intermediate_size=48,
                              num_key_value_heads=2, head_dim=WIDTH // HEADS),
    "falcon": lambda: _decoder("FalconConfig", "FalconForCausalLM"),
    "dinov2_layer_scale": _dinov2,
    "cait_layer_scale": ScaledBlockLM,
    "bloom_embedding_norm": lambda: transformers.BloomForCausalLM(transformers.BloomConfig(
        vocab_size=VOCAB, hidden_size=WIDTH, n_layer=2, n_head=HEADS)),
    "gpt_neox": lambda: _gpt_neox(1.0),
    "phi3_gqa": lambda: _phi3(2),
    "gpt_bigcode_mqa": _gpt_bigcode,
    "qwen3_qk_norms": lambda: _qwen3(2),
    "falcon_split_view_read_again": lambda: BlocksLM(_GatedFalconBlock),
    "gptj_full_rotary": lambda: _gptj(WIDTH // HEADS),
    "gptj_partial_rotary": lambda: _gptj(WIDTH // HEADS // 2),
    "codegen": _codegen,
    "cohere_gqa": _cohere,
    "hand_written_interleaved_rope": lambda: BlocksLM(_InterleavedRopeBlock),
}  # fmt: skip

#: the maps within heads each model admits (``<group suffix>:<kind>`` -> how many groups):
#: q/k under rotary embeddings take one rotation and scaling per frequency plane, v/o any
#: invertible map; partial rotary embeddings (GPT-NeoX's ``rotary_pct`` < 1) mix rotated and
#: unrotated dims in one head, which no q/k group lmc knows keeps, so only v/o is offered there.
#: Multi-query attention (one key/value head, a head group of one unit): one map per layer,
#: shared by every query head. Qwen3's q/k norms (an RMSNorm with a gain over each head's dims)
#: commute with no q/k map beyond permutations, so only v/o is offered there. Interleaved
#: rotary embeddings (planes of dims 2p and 2p + 1) take the same per-plane maps in their layout
#: (kind ``rope_interleaved``); under GPT-J's partial rotary embeddings too, since a plane of
#: dims it leaves unrotated is rotated by angle 0 (which every per-plane map commutes with)
WITHIN = {
    "gpt_neox_full_rotary": (lambda: _gpt_neox(1.0), {"qk:rope": 2, "vo:invertible": 2}),
    "gpt_neox_partial_rotary": (lambda: _gpt_neox(0.5), {"vo:invertible": 2}),
    "phi3_gqa": (lambda: _phi3(2), {"qk:rope": 2, "vo:invertible": 2}),
    "phi3_mha": (lambda: _phi3(HEADS), {"qk:rope": 2}),  # v/o: nested permutation groups
    # one key/value head cut off the fused projection, rotary embeddings joined by cat((rotated,
    # passed)): the view feeds attention through the cat
    "phi3_mqa": (lambda: _phi3(1), {"qk:rope": 2, "vo:invertible": 2}),
    "falcon_mqa": (lambda: _decoder("FalconConfig", "FalconForCausalLM"),
                   {"qk:rope": 2, "vo:invertible": 2}),
    "gpt_bigcode_mqa": (_gpt_bigcode, {"qk:invertible": 2, "vo:invertible": 2}),
    "llama_mqa": (lambda: _decoder("LlamaConfig", "LlamaForCausalLM", intermediate_size=48,
                                   num_key_value_heads=1), {"qk:rope": 2, "vo:invertible": 2}),
    "zoo_llama_mqa": (lambda: build("llama", vocab=VOCAB, context=T, width=WIDTH, depth=2,
                                    heads=HEADS, kv_heads=1), {"qk:rope": 2, "vo:invertible": 2}),
    "hand_written_mqa_view": (lambda: MultiQueryLM(fused=False),
                              {"qk:invertible": 2, "vo:invertible": 2}),
    "hand_written_mqa_fused": (lambda: MultiQueryLM(fused=True),
                               {"qk:invertible": 2, "vo:invertible": 2}),
    "qwen3_qk_norms_gqa": (lambda: _qwen3(2), {"vo:invertible": 2}),
    # v/o of GPT-J and the hand-written one: nested permutation groups, invertible within heads
    "gptj_full_rotary": (lambda: _gptj(WIDTH // HEADS), {"qk:rope_interleaved": 2}),
    "gptj_partial_rotary": (lambda: _gptj(WIDTH // HEADS // 2), {"qk:rope_interleaved": 2}),
    "codegen": (_codegen, {"qk:rope_interleaved": 2, "vo:invertible": 2}),
    "cohere_gqa": (_cohere, {"qk:rope_interleaved": 2, "vo:invertible": 2}),
    "hand_written_interleaved_rope": (lambda: BlocksLM(_InterleavedRopeBlock),
                                      {"qk:rope_interleaved": 2}),
}  # fmt: skip

REFUSED = {
    "olmo2": (
        lambda: _decoder("Olmo2Config", "Olmo2ForCausalLM", intermediate_size=48, pad_token_id=0),
        r"'model\.layers\.0\.post_attention_layernorm' normalises a layer's output on its way "
        "into the residual stream",
    ),
    "t5_encoder": (
        lambda: transformers.T5EncoderModel(transformers.T5Config(
            vocab_size=VOCAB, d_model=WIDTH, d_kv=8, d_ff=48, num_layers=2, num_heads=HEADS,
            dropout_rate=0.0)),
        "T5EncoderModel returns its residual stream's features",
    ),
    "mixtral": (
        lambda: _decoder("MixtralConfig", "MixtralForCausalLM", intermediate_size=48,
                         num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2),
        r"cannot be followed: .*'topk'.* \(in module 'model\.layers\.0\.mlp\.gate'\)",
    ),
    "stream_scale": (
        lambda: ScaledBlockLM(stream_scale=True),
        r"node 'mul_2' \(mul\) in module 'blocks\.0' scales the residual stream feature by "
        "feature",
    ),
    "encoder_layer": (
        EncoderLayerLM,
        r"does not run with its norms \('layers\.0\.norm1'",
    ),
}  # fmt: skip


def _input(name: str) -> torch.Tensor:
    if "dinov2" in name:
        return torch.randn(3, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    return _tokens()


def _perturbed(model: nn.Module, seed: int = 0) -> nn.Module:
    """Every parameter moved by seeded noise (gains away from their init, biases from 0)."""
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
    if isinstance(y, torch.Tensor):
        return y
    logits = getattr(y, "logits", None)
    return logits if logits is not None else y.last_hidden_state


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def _loaded(model: nn.Module, state) -> nn.Module:
    out = copy.deepcopy(model)
    out.load_state_dict(state)
    return out


@pytest.mark.parametrize("name", sorted(WORKS))
def test_canonical_form_symmetries_and_orthogonal_recovery(name):
    model, x = _perturbed(WORKS[name]()), _input(name)
    y = _out(model, x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # heads the tracer leaves whole
        canon = canonicalize(model, x[:2])
        sym = symmetry_spec(canon, x[:2])
    assert _rel(_out(canon, x), y) < TOL
    (stream,) = [g for g, k in sym.kinds.items() if k == "orthogonal"]
    assert sym.group_sizes[stream] == WIDTH
    # every gain on the stream folded (Qwen3's q/k norms act within heads, not on the stream)
    assert not any("norm" in k and not re.search(r"\.[qk]_norm\.", k) for k in canon.state_dict())
    assert not any("scale" in k or "gamma" in k for k in canon.state_dict())  # layer scales too
    for kind in ("orthogonal", "invertible"):
        moved = _loaded(canon, random_alignment(sym, 7, kind).apply(sym, canon.state_dict()))
        assert _rel(_out(moved, x), y) < TOL, kind
    known = Alignment(
        {**random_alignment(sym, 11, "permutation"), stream: Orthogonal.random(WIDTH, 12)}
    )
    moved = _loaded(canon, known.apply(sym, canon.state_dict()))
    assert _rel(_out(moved, x), y) < TOL
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = align("orthogonal", canon, moved, inputs=x)
    for k, v in canon.state_dict().items():
        if v.is_floating_point():
            err = float((result.state_dict[k] - v).abs().max())
            assert err <= TOL * max(1.0, float(v.abs().max())), k


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_with_one_error_naming_the_module_and_permutations_still_work(name):
    make, message = REFUSED[name]
    model, x = _perturbed(make()), _input(name)
    other = _perturbed(copy.deepcopy(model), 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(LmcError, match=message):
            canonicalize(model, x[:2])
        with pytest.raises(LmcError, match=message):
            align("orthogonal", model, other, inputs=x)
        spec = spec_from_model(model, x[:2])
    assert spec.group_sizes  # the permutations lmc finds
    state = model.state_dict()
    moved = apply_permutation(spec, random_permutation(spec, 3), state)
    assert _rel(_out(_loaded(model, moved), x), _out(model, x)) < TOL
    back = apply_permutation(spec, weight_matching(spec, state, moved, seed=0).perm, moved)
    for k, v in state.items():
        assert torch.equal(back[k], v), k


@pytest.mark.parametrize("name", sorted(WITHIN))
def test_maps_within_heads_of_fused_projections_keep_the_function_and_are_learned(name):
    from lmc.models.factory import HFLogits
    from lmc.perm.symmetries.transforms import PLANE_CLASSES, Invertible, Permutation

    make, expected = WITHIN[name]
    model, x = _perturbed(make()), _tokens()
    y = _out(model, x)
    wrap = not isinstance(model(x[:1]), torch.Tensor)  # a Hugging Face model's output
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        canon = canonicalize(model, x[:2])
        sym = symmetry_spec(canon, x[:2])
    found: dict[str, int] = {}
    for g, w in sym.within.items():
        key = f"{g.rpartition(':')[2]}:{w.kind}"
        found[key] = found.get(key, 0) + 1
    assert found == expected
    # a random map within every head alone (heads in place, nothing else moved)
    maps = {g: Permutation.identity(n) for g, n in sym.group_sizes.items()}
    for g, w in sym.within.items():
        cls = PLANE_CLASSES.get(w.kind, Invertible)
        maps[g] = cls.random(w.size, 5, heads=w.heads, head=torch.arange(w.heads))
    moved = _loaded(canon, Alignment(maps).apply(sym, canon.state_dict()))
    assert _rel(_out(moved, x), y) < TOL
    # with every group moved too, and learned alignment returns a map for every within group
    other = _loaded(canon, random_alignment(sym, 13, "invertible").apply(sym, canon.state_dict()))
    assert _rel(_out(other, x), y) < TOL
    a, b, prefix = (HFLogits(canon), HFLogits(other), "hf.") if wrap else (canon, other, "")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = align("learned", a, b, inputs=x, labels=x.roll(-1, 1), task="next-token",
                       steps=2, batch_size=len(x))  # fmt: skip
    assert all(f"{prefix}{g}" in result.alignment for g in sym.within)
    state = {k.removeprefix(prefix): v for k, v in result.state_dict.items()}
    assert _rel(_out(_loaded(canon, state), x), y) < TOL


@pytest.mark.parametrize("kv_heads", [2, HEADS])
def test_per_head_qk_norms_move_whole_heads_and_admit_no_qk_map(kv_heads):
    """Qwen3's q/k norms (an RMSNorm with a gain over each head's dims, before RoPE): whole heads
    still move (q's rows with their key/value head), the gains stay in place, no q/k map within
    heads is offered (none beyond permutations commutes with the norm and RoPE), and v/o keep
    theirs: grouped-query attention's maps within heads, or with a key/value head per query
    head the nested group's invertible maps."""
    model, x = _perturbed(_qwen3(kv_heads)), _tokens()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        canon = canonicalize(model, x[:2])
        sym = symmetry_spec(canon, x[:2])
    attn = "model.layers.0.self_attn"
    (head,) = {seg.perm for seg in sym.spec[f"{attn}.q_proj.weight"][0]}
    assert head is not None and sym.group_sizes[head] == kv_heads
    assert f"{attn}.q_norm.weight" not in sym.spec.permuted_names
    assert not any(g.endswith(":qk") for g in sym.within)
    (v,) = {seg.perm for seg in sym.spec[f"{attn}.v_proj.weight"][0]}
    if kv_heads < HEADS:
        assert v == head and sym.within[f"{head}:vo"].kind == "invertible"
    else:
        assert sym.heads[v] == (head, HEADS) and sym.kinds[v] == "invertible"
    moved = _loaded(canon, random_alignment(sym, 3, "invertible").apply(sym, canon.state_dict()))
    assert _rel(_out(moved, x), _out(model, x)) < TOL


def test_one_key_value_head_is_a_head_group_of_one_unit_shared_by_every_query_head():
    """Multi-query attention: the key/value head is a head group of one unit (it permutes
    nothing); q's rows and the output projection's columns are read in ``HEADS`` tiles of it,
    so the maps within it act alike on every query head."""
    model, x = _perturbed(_decoder("FalconConfig", "FalconForCausalLM")), _tokens()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sym = symmetry_spec(canonicalize(model, x[:2]), x[:2])
    qkv = "transformer.h.0.self_attention.query_key_value.weight"
    (head,) = {seg.perm for seg in sym.spec[qkv][0]}
    assert sym.group_sizes[head] == 1
    tiles = {m.name: m.tiles for m in sym.within[f"{head}:vo"].members}
    assert (tiles[qkv], tiles["transformer.h.0.self_attention.dense.weight"]) == (1, HEADS)
    qk = sym.within[f"{head}:qk"]
    assert (qk.heads, qk.dim, sorted({m.tiles for m in qk.members})) == (1, WIDTH // HEADS,
                                                                      [1, HEADS])  # fmt: skip


def test_a_layer_scale_shared_by_two_branches_is_refused_in_one_line():
    model = _perturbed(ScaledBlockLM())
    for block in model.blocks:
        block.gamma_2 = block.gamma_1  # one gain scaling both branches
    with pytest.raises(LmcError, match="layer scale .* is also .*cannot be folded"):
        canonicalize(model, _tokens())


def test_a_half_precision_canonical_form_that_does_not_run_is_refused():
    model = _perturbed(EncoderLayerLM()).to(torch.bfloat16)
    with pytest.raises(LmcError, match="does not run with its norms"):
        canonicalize(model, _tokens())


class _ViewsLM(nn.Module):
    """No attention: a hidden layer viewed as ``(B, T, 1, C)`` (as one key/value head would be)
    and then ``how``: stacked with another branch by ``cat`` and summed over the new dim, put
    through a LayerNorm module, read by a Linear, or normalised by its own mean square. (With
    ``cat``, the two branches are summed: one group.)"""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.a, self.b = nn.Linear(WIDTH, 48), nn.Linear(WIDTH, 48)
        self.ln = nn.LayerNorm(48)
        self.c = nn.Linear(48, 48)
        self.head = nn.Linear(48, VOCAB)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx)
        n, t, _ = x.shape
        h = torch.relu(self.a(x)).view(n, t, 1, 48)
        if self.how == "cat":
            h = torch.cat([h, torch.relu(self.b(x)).view(n, t, 1, 48)], dim=2).sum(2)
        elif self.how == "layer_norm":
            h = self.ln(h).squeeze(2)
        elif self.how == "linear":
            h = self.c(h).view(n, t, 48)
        else:  # "mean_square"
            h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)).view(n, t, 48)
        return self.head(torch.relu(h))


@pytest.mark.parametrize(
    ("how", "groups"),
    [("cat", {"tok", "a"}), ("layer_norm", {"tok", "a"}), ("linear", {"tok", "a", "c"}),
     ("mean_square", {"tok", "a"})],
)  # fmt: skip
def test_a_view_of_one_head_that_feeds_no_attention_is_a_plain_reshape(how, groups):
    """``(B, T, C) -> (B, T, 1, C)`` is one key/value head only where it feeds attention;
    elsewhere the layers around it keep their groups, without a warning."""
    model, x = _perturbed(_ViewsLM(how)), _tokens()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sym = symmetry_spec(model, x[:2])
    assert set(sym.group_sizes) == groups and not sym.within
    moved = _loaded(model, random_alignment(sym, 3, "permutation").apply(sym, model.state_dict()))
    assert _rel(_out(moved, x), _out(model, x)) < TOL


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_maps_within_heads_of_a_model_with_a_tied_head_are_found(kv_heads):
    """A Llama whose head is tied to its embedding (``tie_word_embeddings``: one tensor under
    two names), with grouped-query or multi-query attention, not canonicalised (the tie
    kept): the numerical check runs the model with the tied tensor given once, and finds the
    maps within heads."""
    llama = _decoder("LlamaConfig", "LlamaForCausalLM", intermediate_size=48,
                     num_key_value_heads=kv_heads, tie_word_embeddings=True)  # fmt: skip
    model, x = _perturbed(llama), _tokens()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sym = symmetry_spec(model, x[:2])
    kinds = sorted(f"{g.rpartition(':')[2]}:{w.kind}" for g, w in sym.within.items())
    assert kinds == ["qk:rope", "qk:rope", "vo:invertible", "vo:invertible"]
    state = random_alignment(sym, 5, "invertible").apply(sym, model.state_dict())
    assert torch.equal(state["lm_head.weight"], state["model.embed_tokens.weight"])
    assert _rel(_out(_loaded(model, state), x), _out(model, x)) < TOL


def test_a_broadcast_product_with_one_key_value_head_is_said_aloud():
    """``q @ k.transpose(-2, -1)`` broadcasting one key/value head over the query heads is not
    followed: what it touches stays in place, with a warning naming the product."""
    model, x = _perturbed(BlocksLM(_BroadcastBlock)), _tokens()
    with pytest.warns(UserWarning, match=r"node 'matmul' .* do not line up"):
        sym = symmetry_spec(model, x[:2])
    moved = _loaded(model, random_alignment(sym, 3, "invertible").apply(sym, model.state_dict()))
    assert _rel(_out(moved, x), _out(model, x)) < TOL


def test_a_key_value_head_that_admits_no_map_within_it_is_no_group():
    """A head group of one unit is kept for the maps within it; where none passes the check
    (q/k normalised per head, v scaled per dim) it is dropped: no group that cannot move."""
    model, x = _perturbed(BlocksLM(_NoMapBlock)), _tokens()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sym = symmetry_spec(model, x[:2])
    assert not sym.within
    assert all(n > 1 for n in sym.group_sizes.values()), sym.group_sizes
    assert "blocks.0.fc1" in sym.group_sizes
    moved = _loaded(model, random_alignment(sym, 3, "invertible").apply(sym, model.state_dict()))
    assert _rel(_out(moved, x), _out(model, x)) < TOL


@pytest.mark.parametrize(
    ("make", "kind", "other"),
    [(lambda: _gptj(WIDTH // HEADS), "rope_interleaved", "rope"),
     (lambda: BlocksLM(_InterleavedRopeBlock), "rope_interleaved", "rope"),
     (lambda: _decoder("LlamaConfig", "LlamaForCausalLM", intermediate_size=48), "rope",
      "rope_interleaved")],
    ids=["gptj", "hand_written_interleaved", "llama"],
)  # fmt: skip
def test_rotary_plane_maps_of_the_other_layout_change_the_function(make, kind, other):
    """The two layouts of rotary planes are different groups: a random per-plane map of the
    model's own layout keeps its function, one of the other layout (the spec told it is of that
    kind, so that the alignment's check admits it) changes it."""
    from lmc.perm.symmetries.transforms import PLANE_CLASSES, Permutation

    model, x = _perturbed(make()), _tokens()
    y = _out(model, x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        canon = canonicalize(model, x[:2])
        sym = symmetry_spec(canon, x[:2])
    qk = {g: w for g, w in sym.within.items() if g.endswith(":qk")}
    assert len(qk) == 2 and {w.kind for w in qk.values()} == {kind}
    identity = {g: Permutation.identity(n) for g, n in sym.group_sizes.items()}

    def change(planes: str) -> float:
        told = dataclasses.replace(
            sym, within={g: dataclasses.replace(w, kind=planes) if g in qk else w
                         for g, w in sym.within.items()})  # fmt: skip
        maps = {g: PLANE_CLASSES[planes].random(w.size, 5, heads=w.heads,
                                                head=torch.arange(w.heads))
                for g, w in qk.items()}  # fmt: skip
        state = Alignment({**identity, **maps}).apply(told, canon.state_dict())
        return _rel(_out(_loaded(canon, state), x), y)

    assert change(kind) < TOL
    assert change(other) > 10 * TOL, change(other)  # rounding: about 1e-7


def test_a_stack_of_whole_heads_is_not_understood():
    """Only a stack of slices of the dims within heads is followed: q and k stacked whole
    leave their groups unpermuted, with the warning any op not understood gives."""
    model, x = _perturbed(BlocksLM(_StackedQKBlock)), _tokens()
    with pytest.warns(UserWarning, match=r"node 'stack' .* is not understood"):
        sym = symmetry_spec(model, x[:2])
    assert not any(".q" in g or ".k" in g for g in sym.group_sizes), sym.group_sizes
    assert not sym.within
    moved = _loaded(model, random_alignment(sym, 3, "invertible").apply(sym, model.state_dict()))
    assert _rel(_out(moved, x), _out(model, x)) < TOL


class _RotatedBeforeTransposeBlock(nn.Module):
    """q and k turned a quarter of each interleaved plane on ``(B, T, H, d)`` before the
    transpose (a fixed rotation of both: the scores, and any invertible q/k map, are kept),
    stacked with ``dim=`` or with torch's alias ``axis=``. With d/2 = H a stack read along the
    wrong dim would pass for one along the heads."""

    def __init__(self, keyword: str) -> None:
        super().__init__()
        self.keyword = keyword
        _add_norms_qkv_output_and_mlp(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.norm1(x)
        q, k, v = (z(h).view(b, t, HEADS, -1) for z in (self.q, self.k, self.v))
        q, k = (
            torch.stack((-z[..., 1::2], z[..., ::2]), **{self.keyword: -1}).flatten(-2)
            for z in (q, k)
        )
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return _output_and_mlp(self, x, y)


@pytest.mark.parametrize("keyword", ["dim", "axis"])
def test_a_stack_along_axis_is_read_as_along_dim(keyword):
    """``torch.stack(..., axis=-1)`` is ``dim=-1``: both keep the heads where they are (a stack
    read along dim 0 put the head group on the planes' dim and broke the function by 9 %)."""
    assert (WIDTH // HEADS) // 2 == HEADS  # the case where a wrong dim passes the size check
    model, x = _perturbed(BlocksLM(lambda: _RotatedBeforeTransposeBlock(keyword))), _tokens()
    y = _out(model, x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sym = symmetry_spec(model, x[:2])
    assert any(g.endswith(":qk") for g in sym.within)  # a fixed rotation: any invertible map
    for kind in ("permutation", "invertible"):
        moved = _loaded(model, random_alignment(sym, 3, kind).apply(sym, model.state_dict()))
        assert _rel(_out(moved, x), y) < TOL, kind
