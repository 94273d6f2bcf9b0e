"""A small Llama-style causal language model (token ids in, next-token logits out).

What makes it Llama-style, against the zoo's ``gpt``: pre-RMSNorm with a gain and no bias
(``nn.RMSNorm``, eps 1e-6), rotary position embeddings instead of learned positions, a SwiGLU
MLP (``down(silu(gate x) ⊙ up x)``), optional grouped-query attention, no biases anywhere, a
final RMSNorm and an untied head by default.

Conventions (those of Hugging Face's ``LlamaForCausalLM``, so both can be read alike):

- Rotary embeddings, half-split (``rotate_half``): within a head of ``d_h`` dims, dim ``i`` and
  dim ``i + d_h/2`` (``0 <= i < d_h/2``) form one rotation plane, turned at position ``t`` by
  the angle ``t · θ^(−2i/d_h)`` (``θ`` = ``rope_theta``, 10000)::

      rope(x)_t = x_t · cos_t + rotate_half(x_t) · sin_t,  rotate_half(x) = (−x[d_h/2:], x[:d_h/2])

  with ``cos_t``/``sin_t`` the plane's cosine and sine repeated over both halves. Applied to q
  and k after their projections, never to v; angles are computed in float32.
- Grouped-query attention: ``kv_heads`` key/value heads, each shared by ``heads / kv_heads``
  consecutive query heads (query head ``h`` reads key/value head ``h // (heads / kv_heads)``,
  Hugging Face's ``repeat_kv``).
- SwiGLU hidden units: ``round(mlp_ratio · width)`` rounded up to a multiple of
  ``multiple_of``; ``mlp_ratio`` unset (the default) is 8/3, Llama's ``int(2 · 4 · width /
  3)`` rule, so the MLP has as many weights as a GELU MLP of 4 · width units (width 128 ->
  344 units, 256 -> 688 with ``multiple_of`` 8).

Symmetries (what ``lmc.perm.spec_from_model`` finds, each keeping the function exactly): the
residual stream (one permutation shared by every writer, every RMSNorm gain and every reader),
the SwiGLU hidden units (gate and up rows, down's columns: one permutation per block), the
key/value heads (with the query heads that read them: whole groups move), and, without
grouped-query attention, the dims within each value head (v's rows, the output projection's
columns). RoPE leaves the q/k dims within heads in place: a permutation of them commutes with
the rotation only if it maps each plane to a plane of the same frequency, i.e. in general the
identity.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from lmc.config import LmcError, check_int

from ._causal_lm import finish_causal_lm
from .init import normal_draw_
from .options import ModelOption
from .probes import ProbePoint
from .registry import register_model
from .transformer import (
    TIED_OPTION,
    Attention,
    block_probe_points,
    check_number_above,
    check_transformer,
    complete_transformer,
    hidden_units,
    logits_probe_point,
    token_window_inputs,
    transformer_entry,
)

EMBED_STD = 0.02  # std of the token embedding at initialisation (GPT-2's, as the zoo's gpt)
NORM_EPS = 1e-6  # RMSNorm's eps (Hugging Face LlamaConfig's default rms_norm_eps)
MLP_RATIO = 8 / 3  # SwiGLU hidden units per stream dim before rounding (Llama's 2/3 of 4)
_NORMS: tuple[type[nn.Module], ...] = (nn.RMSNorm,) if hasattr(nn, "RMSNorm") else ()


def _rms_norm(width: int) -> nn.Module:
    """RMSNorm over the last dim with a gain (``nn.RMSNorm`` where torch has it)."""
    if hasattr(nn, "RMSNorm"):
        return nn.RMSNorm(width, eps=NORM_EPS)
    return _RMSNorm(width)  # pragma: no cover - torch < 2.4


class _RMSNorm(nn.Module):
    """``x / sqrt(mean(x²) + eps) · weight`` over the last dim (for torch without nn.RMSNorm)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + NORM_EPS) * self.weight


def swiglu_hidden(width: int, mlp_ratio: float | None = None, multiple_of: int = 8) -> int:
    """Hidden units of the SwiGLU MLP: ``round(mlp_ratio · width)`` rounded up to a multiple
    of ``multiple_of``; ``mlp_ratio=None`` is 8/3 (width 128 -> 344, 256 -> 688)."""
    units = hidden_units(width, MLP_RATIO if mlp_ratio is None else mlp_ratio)
    return multiple_of * math.ceil(units / multiple_of)


def check_llama(name: str, options: Mapping[str, Any]) -> None:
    """``LmcError`` for Llama options out of range (besides the registry's generic checks)."""
    check_transformer(name, options)
    for key, minimum in (("vocab", 2), ("context", 1), ("multiple_of", 1)):
        check_int(f"{name}: {key}", options.get(key), minimum=minimum, optional=True)
    kv = check_int(f"{name}: kv_heads", options.get("kv_heads"), optional=True)
    width, heads = options.get("width"), options.get("heads")
    if kv is not None and isinstance(heads, int) and heads >= 1 and heads % kv:
        raise LmcError(
            f"{name}: kv_heads ({kv}) must divide heads ({heads}): each key/value head serves "
            "the same number of query heads"
        )
    if isinstance(width, int) and isinstance(heads, int) and heads >= 1 and not width % heads:
        if (width // heads) % 2:
            raise LmcError(
                f"{name}: the head dimension width / heads = {width // heads} must be even "
                "(rotary embeddings turn pairs of dims)"
            )
    if "tied" in options and not isinstance(options["tied"], bool):
        raise LmcError(f"{name}: tied must be true or false, got {options['tied']!r}")
    check_number_above(name, options, "rope_theta", 1, "a number above 1")


def complete_llama(options: dict[str, Any]) -> dict[str, Any]:
    """Resolved options: ``kv_heads`` = ``heads`` when not given (no grouping), numbers typed;
    ``mlp_ratio`` unset stays unset (Llama's 8/3 rule, :func:`swiglu_hidden`)."""
    out = complete_transformer(options)
    if out.get("kv_heads") is None:
        out["kv_heads"] = out.get("heads")
    theta = out.get("rope_theta")
    if isinstance(theta, int) and not isinstance(theta, bool):
        out["rope_theta"] = float(theta)
    return out


llama_inputs = token_window_inputs("llama")


def rope_angles(
    length: int, head_dim: int, theta: float, device: torch.device | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cos, sin)`` of shape (length, head_dim), float32: position t, plane i's angle
    ``t · theta^(−2i/head_dim)`` repeated over both halves of the head (half-split RoPE)."""
    inv_freq = 1.0 / theta ** (
        torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim
    )
    positions = torch.arange(length, device=device, dtype=torch.float32)
    angles = positions[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``(−x[..., d/2:], x[..., :d/2])`` along the last dim (Hugging Face's ``rotate_half``)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of ``x`` (…, T, d_h) by ``cos``, ``sin`` (T, d_h) of
    :func:`rope_angles`."""
    return x * cos + rotate_half(x) * sin


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """(n, kv_heads, T, d) -> (n, kv_heads · groups, T, d): key/value head ``g`` serves query
    heads ``g · groups`` … ``g · groups + groups − 1`` (Hugging Face's ``repeat_kv``)."""
    n, kv, length, d = x.shape
    return x[:, :, None, :, :].expand(n, kv, groups, length, d).reshape(n, kv * groups, length, d)


class GroupedAttention(Attention):
    """The heads' computation with key/value heads shared by ``groups`` query heads each:
    ``forward(q, k, v)`` takes q (n, heads, T, d_h) and k, v (n, heads / groups, T, d_h), and
    returns softmax(q kᵀ / √d_h) v per query head (n, heads, T, d_h), k and v repeated by
    :func:`repeat_kv`. Weightless, like :class:`Attention`: the analysis hooks it."""

    def __init__(self, causal: bool = True, groups: int = 1) -> None:
        super().__init__(causal)
        self.groups = groups

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.groups > 1:
            k, v = repeat_kv(k, self.groups), repeat_kv(v, self.groups)
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)


class LlamaAttention(nn.Module):
    """Causal self-attention with rotary q/k and optional grouped-query attention, no biases.

    ``q``: Linear width -> heads · d_h; ``k``, ``v``: width -> kv_heads · d_h; ``out``: heads ·
    d_h -> width (d_h = width / heads). q and k are rotated by :func:`apply_rope`, then the
    weightless ``attend`` (:class:`GroupedAttention`) computes the heads.
    """

    def __init__(self, width: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, width // heads
        self.q = nn.Linear(width, heads * self.head_dim, bias=False)
        self.k = nn.Linear(width, kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(width, kv_heads * self.head_dim, bias=False)
        self.attend = GroupedAttention(causal=True, groups=heads // kv_heads)
        self.out = nn.Linear(heads * self.head_dim, width, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        n, length = x.shape[0], x.shape[1]
        q = self.q(x).view(n, length, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(x).view(n, length, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(x).view(n, length, self.kv_heads, self.head_dim).transpose(1, 2)
        y = self.attend(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v)
        return self.out(y.transpose(1, 2).reshape(n, length, self.heads * self.head_dim))


class SwiGLU(nn.Module):
    """``down(silu(gate x) ⊙ up x)``: ``gate``, ``up`` (width -> hidden), ``down`` (hidden ->
    width), no biases. ``act`` is the SiLU (its input: the gate's pre-activation) and
    ``hidden`` an identity whose output is the hidden units themselves (down's input), so the
    analysis can hook both."""

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.gate = nn.Linear(width, hidden, bias=False)
        self.up = nn.Linear(width, hidden, bias=False)
        self.act = nn.SiLU()
        self.hidden = nn.Identity()
        self.down = nn.Linear(hidden, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.hidden(self.act(self.gate(x)) * self.up(x)))


class LlamaBlock(nn.Module):
    """Pre-RMSNorm block: x + attn(norm1(x)), then x + mlp(norm2(x))."""

    def __init__(self, width: int, heads: int, kv_heads: int, hidden: int) -> None:
        super().__init__()
        self.norm1 = _rms_norm(width)
        self.attn = LlamaAttention(width, heads, kv_heads)
        self.norm2 = _rms_norm(width)
        self.mlp = SwiGLU(width, hidden)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), cos, sin)
        return x + self.mlp(self.norm2(x))


class Llama(nn.Module):
    """Token embedding -> causal pre-RMSNorm blocks with RoPE and SwiGLU -> RMSNorm -> head.

    Input: token ids (n, T), T <= ``context``. Output: logits (n, T, vocab); position t's
    logits predict token t + 1 and depend only on tokens 0..t. No position embedding (RoPE
    inside attention), no biases, no dropout. ``tied``: the head uses the token embedding's
    weight (``tok.weight`` and ``head.weight`` name one tensor); untied (the default, as
    Llama), it has its own. See the module docstring for the conventions.

    Module names: ``tok`` (Embedding), ``blocks.{i}`` (``norm1``, ``attn.q/k/v/attend/out``,
    ``norm2``, ``mlp.gate/up/act/hidden/down``), ``norm``, ``head``. Hugging Face's
    ``LlamaForCausalLM`` names them ``model.embed_tokens``, ``model.layers.{i}``
    (``input_layernorm``, ``self_attn.q_proj/k_proj/v_proj/o_proj``,
    ``post_attention_layernorm``, ``mlp.gate_proj/up_proj/down_proj``), ``model.norm``,
    ``lm_head``.
    """

    def __init__(
        self,
        *,
        vocab: int = 64,
        context: int = 32,
        width: int = 128,
        depth: int = 2,
        heads: int = 4,
        kv_heads: int | None = None,
        mlp_ratio: float | None = None,
        multiple_of: int = 8,
        tied: bool = False,
        rope_theta: float = 10000.0,
    ) -> None:
        super().__init__()
        width = int(width)
        kv_heads = heads if kv_heads is None else kv_heads
        check_llama(
            "llama",
            dict(
                vocab=vocab,
                context=context,
                width=width,
                heads=heads,
                kv_heads=kv_heads,
                mlp_ratio=mlp_ratio,
                multiple_of=multiple_of,
                tied=tied,
                rope_theta=rope_theta,
            ),
        )
        self.vocab, self.context, self.width = vocab, context, width
        self.depth, self.heads, self.kv_heads, self.tied = depth, heads, kv_heads, tied
        self.head_dim, self.rope_theta = width // heads, float(rope_theta)
        self.hidden = swiglu_hidden(width, mlp_ratio, multiple_of)
        self.tok = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(
            [LlamaBlock(width, heads, kv_heads, self.hidden) for _ in range(depth)]
        )
        self.norm = _rms_norm(width)
        finish_causal_lm(self, "llama")

    @torch.no_grad()
    def lmc_init(self, generator: torch.Generator | None) -> None:
        """Token embedding ~ N(0, 0.02²) (called by ``initialize``; a tied head shares it, an
        untied one keeps its Linear default) and every RMSNorm gain 1."""
        normal_draw_(self.tok.weight, EMBED_STD, generator)
        for module in self.modules():
            if module is not self and isinstance(module, (_RMSNorm, *_NORMS)):
                module.weight.fill_(1.0)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        cos, sin = rope_angles(idx.shape[1], self.head_dim, self.rope_theta, idx.device)
        x = self.tok(idx)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x))

    def probe_points(self) -> list[ProbePoint]:
        """``attn{i}``, ``mlp{i}`` and ``block{i}`` per block as the zoo's ``gpt`` declares
        them (:func:`lmc.models.transformer.block_probe_points`), with ``mlp{i}`` the SwiGLU
        hidden units silu(gate x) ⊙ up x (output ``mlp.hidden``, weight ``mlp.gate``,
        pre-activation the gate's output into ``mlp.act``, σ = SiLU), then the ``logits``."""
        points = []
        for point in block_probe_points(self.depth):
            if point.kind == "hidden":
                base = point.output.removesuffix(".act")
                point = dataclasses.replace(
                    point,
                    output=f"{base}.hidden",
                    weight=f"{base}.gate",
                    preactivation=f"{base}.act",
                )
            points.append(point)
        points.append(logits_probe_point(self.depth, layout="tokens"))
        return points


@register_model(
    "llama",
    **transformer_entry(
        llama_inputs,
        depth=2,
        options={
            "kv_heads": ModelOption(
                None,
                "key/value heads, dividing --heads (fewer: grouped-query attention)",
                type=int,
                default_text="--heads",
            ),
            "mlp_ratio": ModelOption(
                None,
                "SwiGLU hidden units per embedding dimension before rounding",
                type=float,
                default_text="8/3",
            ),
            "multiple_of": ModelOption(8, "SwiGLU hidden units are rounded up to a multiple of it"),
            "tied": dataclasses.replace(TIED_OPTION, default=False),
            "rope_theta": ModelOption(10000.0, "base of the rotary embeddings' angles"),
        },
    ),
    description=(
        "Llama-style causal LM over token ids (RMSNorm, RoPE, SwiGLU, grouped-query attention "
        "with kv_heads dividing heads; default kv_heads = heads): width is the embedding "
        "dimension, depth the blocks"
    ),
    check=check_llama,
    complete=complete_llama,
)
def llama(**options) -> Llama:
    return Llama(**options)
