"""A small causal GPT-style language model (token ids in, next-token logits out)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from lmc.config import LmcError, check_int

from ._causal_lm import finish_causal_lm
from .init import normal_draw_
from .probes import ProbePoint
from .registry import register_model
from .transformer import (
    TIED_OPTION,
    block_probe_points,
    check_transformer,
    complete_transformer,
    logits_probe_point,
    make_blocks,
    pre_ln_entry,
    token_window_inputs,
)

EMBED_STD = 0.02  # std of the token and position embeddings at initialisation (GPT-2's)


def check_gpt(name: str, options: Mapping[str, Any]) -> None:
    """``LmcError`` for GPT options out of range (besides the registry's generic checks)."""
    check_transformer(name, options)
    for key, minimum in (("vocab", 2), ("context", 1)):
        check_int(f"{name}: {key}", options.get(key), minimum=minimum, optional=True)
    if "tied" in options and not isinstance(options["tied"], bool):
        raise LmcError(f"{name}: tied must be true or false, got {options['tied']!r}")


gpt_inputs = token_window_inputs("gpt")


class GPT(nn.Module):
    """Token + learned position embeddings -> causal pre-LN blocks -> LayerNorm -> head.

    Input: token ids (n, T), T <= ``context``. Output: logits (n, T, vocab); position t's
    logits predict token t + 1 and depend only on tokens 0..t (causal attention). Attention
    uses one fused Linear ``qkv`` (width -> 3·width) split into q, k, v. ``tied``: the head
    (a bias-free Linear width -> vocab) uses the token embedding's weight (one tensor, two
    names in the state dict: ``tok.weight`` and ``head.weight``); untied, it has its own.
    No dropout.

    Module names: ``tok``, ``pos`` (Embeddings), ``blocks.{i}`` (``norm1``, ``attn.qkv/out``,
    ``norm2``, ``mlp.fc1/act/fc2``), ``norm``, ``head``.
    """

    def __init__(
        self,
        *,
        vocab: int = 64,
        context: int = 32,
        width: int = 128,
        depth: int = 2,
        heads: int = 4,
        mlp_ratio: float = 4.0,
        tied: bool = True,
        activation: str = "gelu",
        bias: bool = True,
    ) -> None:
        super().__init__()
        width = int(width)
        check_gpt(
            "gpt",
            dict(
                vocab=vocab,
                context=context,
                width=width,
                heads=heads,
                mlp_ratio=mlp_ratio,
                tied=tied,
            ),
        )
        self.vocab, self.context, self.width = vocab, context, width
        self.depth, self.tied = depth, tied
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(context, width)
        self.blocks = make_blocks(
            depth,
            width,
            heads,
            mlp_ratio,
            activation=activation,
            bias=bias,
            causal=True,
            fused=True,
        )
        self.norm = nn.LayerNorm(width, bias=bias)
        finish_causal_lm(self, "gpt")

    @torch.no_grad()
    def lmc_init(self, generator: torch.Generator | None) -> None:
        """Token and position embeddings ~ N(0, 0.02²) (called by ``initialize``; a tied head
        shares the token embedding's draw, an untied one keeps its Linear default)."""
        for param in (self.tok.weight, self.pos.weight):
            normal_draw_(param, EMBED_STD, generator)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.blocks(self.tok(idx) + self.pos(positions))
        return self.head(self.norm(x))

    def probe_points(self) -> list[ProbePoint]:
        """``mlp{i}`` and ``block{i}`` per block (see
        :func:`lmc.models.transformer.block_probe_points`: tokens are positions), then the
        ``logits`` (n, T, vocab), also in the tokens layout (vocab entries as units)."""
        points = block_probe_points(self.depth)
        points.append(logits_probe_point(self.depth, layout="tokens"))
        return points


@register_model(
    "gpt",
    **pre_ln_entry(gpt_inputs, depth=2, mlp_ratio=4.0, options={"tied": TIED_OPTION}),
    description="causal GPT over token ids: width is the embedding dimension, depth the blocks",
    check=check_gpt,
    complete=complete_transformer,
)
def gpt(**options) -> GPT:
    return GPT(**options)
