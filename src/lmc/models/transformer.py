"""The pieces the zoo's transformers share: attention written out, the MLP, a pre-LN block.

Tensors are (n, T, d): n sequences of T tokens with d = ``width`` features each, features
last. Attention is spelled out (q, k, v Linear maps, a reshape to heads,
``F.scaled_dot_product_attention``, heads merged back, an output Linear) rather than
``nn.MultiheadAttention``, so every weight is a plain Linear the analysis and ``lmc.perm`` see.
Forward passes branch on nothing but constructor settings, so ``torch.fx`` can trace them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from lmc.config import LmcError

from .layers import BIAS_OPTION, activation_option, make_activation
from .options import ModelOption
from .probes import ProbePoint

# weight layers along a block's longest path: v and the output projection, then fc1 and fc2
LAYERS_PER_BLOCK = 4
#: The options the zoo transformers share.
HEADS_OPTION = ModelOption(4, "attention heads (llama: query heads); must divide --width")
TIED_OPTION = ModelOption(True, "the output head shares the token embedding")


def transformer_entry(
    inputs: Callable[..., dict[str, Any]], depth: int, options: Mapping[str, Any]
) -> dict[str, Any]:
    """The :func:`lmc.models.registry.register_model` keywords every zoo transformer shares:
    its width is the embedding dimension (default 128), read from the data by ``inputs``; its
    options are ``depth`` (default ``depth`` blocks) and ``heads``, then its own ``options``."""
    declared = {"depth": ModelOption(depth, "transformer blocks"), "heads": HEADS_OPTION}
    return dict(
        width="units",
        default_width=128,
        width_label="embedding dimension",
        inputs=inputs,
        options={**declared, **options},
    )


def pre_ln_entry(
    inputs: Callable[..., dict[str, Any]],
    depth: int,
    mlp_ratio: float,
    options: Mapping[str, Any],
) -> dict[str, Any]:
    """:func:`transformer_entry` of a model built on :func:`make_blocks` (zoo ``gpt`` and
    ``vit``): after ``heads``, the blocks' ``mlp_ratio`` (default ``mlp_ratio``), the model's
    own ``options``, then the blocks' ``activation`` (default GELU) and ``bias``. Such a model
    is ``widenable``: :func:`lmc.perm.symmetries.widening.embed_transformer` writes any pre-LN
    transformer lmc canonicalises into a wider one."""
    declared = {
        "mlp_ratio": ModelOption(mlp_ratio, "MLP hidden units per embedding dimension"),
        **options,
        "activation": activation_option("gelu"),
        "bias": BIAS_OPTION,
    }
    return {**transformer_entry(inputs, depth, declared), "widenable": True}


def hidden_units(width: int, mlp_ratio: float) -> int:
    """Hidden units of a block's MLP: round(mlp_ratio x width), at least 1."""
    return max(1, int(round(width * mlp_ratio)))


def check_number_above(
    name: str, options: Mapping[str, Any], key: str, bound: float, what: str
) -> None:
    """``LmcError`` unless option ``key`` is unset or a finite number above ``bound`` (not a
    bool); ``what`` says so in the message (``a positive number``)."""
    value = options.get(key)
    if value is not None and (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= bound
    ):
        raise LmcError(f"{name}: {key} must be {what}, got {value!r}")


def check_transformer(name: str, options: Mapping[str, Any]) -> None:
    """``LmcError`` for the options every zoo transformer shares (``width``, ``heads``,
    ``mlp_ratio``); ``options`` hold the registry defaults under the given ones."""
    width, heads = options.get("width"), options.get("heads")
    if isinstance(width, int) and isinstance(heads, int) and heads >= 1 and width % heads:
        raise LmcError(
            f"{name}: width (the embedding dimension, {width}) must be divisible by heads ({heads})"
        )
    check_number_above(name, options, "mlp_ratio", 0, "a positive number")


def complete_transformer(options: dict[str, Any]) -> dict[str, Any]:
    """Resolved options with an integer ``mlp_ratio`` as a float (2 and 2.0: one config)."""
    out = dict(options)
    ratio = out.get("mlp_ratio")
    if isinstance(ratio, int) and not isinstance(ratio, bool):
        out["mlp_ratio"] = float(ratio)
    return out


class Attention(nn.Module):
    """The heads' own computation, softmax(q kᵀ / √d_h) v, as a module of its own.

    ``forward(q, k, v)`` takes (n, heads, T, d_h) tensors and returns the heads' outputs
    (n, heads, T, d_h); with ``causal=True`` token t attends only to tokens 0..t. It has no
    weights: it exists so the layerwise analysis can hook the heads' inputs (q, k, v) and
    outputs (their weak additivity, docs/science.md), as it hooks an activation module.
    """

    def __init__(self, causal: bool = False) -> None:
        super().__init__()
        self.causal = causal

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)


class SelfAttention(nn.Module):
    """Multi-head self-attention on (n, T, d).

    ``fused=False``: three Linear maps ``q``, ``k``, ``v`` (d -> d); ``fused=True``: one Linear
    ``qkv`` (d -> 3d) whose output is split into q, k, v (in that order). Each of q, k, v is
    reshaped to (n, heads, T, d / heads); the heads compute softmax(q kᵀ / √(d / heads)) v
    (the weightless module ``attend``, :class:`Attention`), where with ``causal=True`` token t
    attends only to tokens 0..t; the heads are merged back to (n, T, d) and mapped by the
    Linear ``out``.
    """

    def __init__(
        self,
        width: int,
        heads: int,
        *,
        bias: bool = True,
        causal: bool = False,
        fused: bool = False,
    ) -> None:
        super().__init__()
        if width % heads:
            raise LmcError(f"width ({width}) must be divisible by heads ({heads})")
        self.width, self.heads, self.head_dim = width, heads, width // heads
        self.causal, self.fused = causal, fused
        if fused:
            self.qkv = nn.Linear(width, 3 * width, bias=bias)
        else:
            self.q = nn.Linear(width, width, bias=bias)
            self.k = nn.Linear(width, width, bias=bias)
            self.v = nn.Linear(width, width, bias=bias)
        self.attend = Attention(causal)
        self.out = nn.Linear(width, width, bias=bias)

    def _heads(self, t: torch.Tensor, n: Any, length: Any) -> torch.Tensor:
        return t.view(n, length, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, length = x.shape[0], x.shape[1]
        if self.fused:
            q, k, v = self.qkv(x).split(self.width, dim=-1)
        else:
            q, k, v = self.q(x), self.k(x), self.v(x)
        q, k, v = self._heads(q, n, length), self._heads(k, n, length), self._heads(v, n, length)
        y = self.attend(q, k, v)
        return self.out(y.transpose(1, 2).reshape(n, length, self.width))


class FeedForward(nn.Module):
    """The block's MLP: ``fc1`` (d -> hidden), ``act``, ``fc2`` (hidden -> d)."""

    def __init__(self, width: int, hidden: int, activation: str, bias: bool) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, hidden, bias=bias)
        self.act = make_activation(activation)
        self.fc2 = nn.Linear(hidden, width, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(norm1(x)), then x + mlp(norm2(x)).

    Its output is the residual stream after the block. LayerNorms normalise over the d
    features (with a bias only when ``bias``).
    """

    def __init__(
        self,
        width: int,
        heads: int,
        hidden: int,
        *,
        activation: str,
        bias: bool,
        causal: bool,
        fused: bool,
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width, bias=bias)
        self.attn = SelfAttention(width, heads, bias=bias, causal=causal, fused=fused)
        self.norm2 = nn.LayerNorm(width, bias=bias)
        self.mlp = FeedForward(width, hidden, activation, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def make_blocks(
    depth: int,
    width: int,
    heads: int,
    mlp_ratio: float,
    *,
    activation: str,
    bias: bool,
    causal: bool,
    fused: bool,
) -> nn.Sequential:
    """``depth`` blocks in an ``nn.Sequential`` (module names ``blocks.0`` ... by the caller)."""
    hidden = hidden_units(width, mlp_ratio)
    return nn.Sequential(
        *[
            Block(
                width, heads, hidden, activation=activation, bias=bias, causal=causal, fused=fused
            )
            for _ in range(depth)
        ]
    )


def logits_probe_point(depth: int, layout: str = "channels") -> ProbePoint:
    """The ``logits`` probe point of a zoo transformer of ``depth`` blocks: the ``head``'s
    output, layer 4 depth + 2 (see :func:`block_probe_points`); ``layout`` ``tokens`` for a
    language model's (n, T, vocab), ``channels`` for a classifier's (n, classes)."""
    return ProbePoint(
        "logits", LAYERS_PER_BLOCK * depth + 2, "logits", "head", "head", layout=layout
    )


def block_probe_points(depth: int, prefix: str = "blocks") -> list[ProbePoint]:
    """Per block i = 1..depth: ``attn{i}`` (the heads' outputs before the output projection,
    kind ``attention``, ``heads`` layout: the hooked module is ``attn.attend``, whose inputs
    (q, k, v) play the pre-activation's part), ``mlp{i}`` (the MLP hidden units after the
    activation; weight ``fc1``, pre-activation the activation's input) and ``block{i}`` (the
    residual stream after the block), the last two in the ``tokens`` layout.

    ``layer`` counts weight layers along the longest path: the embedding is layer 1 and each
    block adds four (v, the output projection, fc1, fc2), so ``attn{i}`` (after v) is layer
    4i − 2, ``mlp{i}`` layer 4i and ``block{i}`` layer 4i + 1; the logits after ``depth``
    blocks are layer 4 depth + 2.
    """
    points = []
    for i in range(1, depth + 1):
        base = f"{prefix}.{i - 1}"
        points.append(
            ProbePoint(
                f"attn{i}",
                LAYERS_PER_BLOCK * i - 2,
                "attention",
                f"{base}.attn.attend",
                None,
                f"{base}.attn.attend",
                layout="heads",
            )
        )
        points.append(
            ProbePoint(
                f"mlp{i}",
                LAYERS_PER_BLOCK * i,
                "hidden",
                f"{base}.mlp.act",
                f"{base}.mlp.fc1",
                f"{base}.mlp.act",
                layout="tokens",
            )
        )
        points.append(
            ProbePoint(f"block{i}", LAYERS_PER_BLOCK * i + 1, "block", base, layout="tokens")
        )
    return points


def token_window_inputs(name: str) -> Callable[..., dict[str, Any]]:
    """The data-given options of causal LM ``name`` (zoo ``gpt``, ``llama``): ``vocab`` (the
    next-token dataset's number of token ids) and ``context`` (its window length T); any other
    data is an ``LmcError``. Declares ``keys`` and per-position ``outputs`` for the registry."""

    def inputs(
        input_shape: Sequence[int], num_classes: int, task: str = "classification"
    ) -> dict[str, Any]:
        if task != "next-token" or len(input_shape) != 1:
            raise LmcError(
                f"{name} reads token windows (n, context) and predicts the next token at each "
                f"position; this dataset holds {task} examples of shape {tuple(input_shape)}: "
                f"train it on text (lmc train --model {name} --data corpus.txt, or --dataset "
                "fortunes)"
            )
        return {"vocab": int(num_classes), "context": int(input_shape[0])}

    inputs.keys = ("vocab", "context")  # type: ignore[attr-defined]
    inputs.outputs = ("per-position",)  # type: ignore[attr-defined]
    return inputs


class TokenIdsCheck:
    """A forward pre-hook for causal LM ``name``: a one-line ``LmcError`` for input that is
    not integer token ids of shape (n, T) with T <= the module's ``context``. A class, not a
    closure, so a model holding it pickles."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, module: nn.Module, args: tuple) -> None:
        name, x = self.name, (args[0] if args else None)
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.is_floating_point():
            what = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise LmcError(f"{name}: input must be integer token ids of shape (n, T), got {what}")
        if x.shape[1] > module.context:
            raise LmcError(f"{name}: {x.shape[1]} tokens exceed the context of {module.context}")
