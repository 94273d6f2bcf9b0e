"""Vision Transformer (Dosovitskiy et al. 2021) for small images, pre-LayerNorm, no dropout."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from lmc.config import LmcError, check_int

from .init import normal_draw_
from .options import ModelOption
from .probes import ProbePoint
from .registry import register_model
from .transformer import (
    block_probe_points,
    check_transformer,
    complete_transformer,
    logits_probe_point,
    make_blocks,
    pre_ln_entry,
)

POOLS = ("cls", "mean")
# what build("vit") assumes when no data gave the input options (a CIFAR-sized image)
INPUT_DEFAULTS = {"in_channels": 3, "image_size": 32, "num_classes": 10}
POSITION_STD = 0.02  # std of the class token and position embedding at initialisation


def image_hw(image_size: int | Sequence[int]) -> tuple[int, int]:
    """``image_size`` (an int for a square image, or ``(H, W)``) as ``(H, W)``."""
    if isinstance(image_size, (list, tuple)):
        if len(image_size) != 2:
            raise LmcError(f"vit: image_size must be H or [H, W], got {list(image_size)!r}")
        return int(image_size[0]), int(image_size[1])
    return int(image_size), int(image_size)


def default_patch(image_size: int | Sequence[int]) -> int:
    """The patch size ``patch = "auto"`` stands for: 2 for an image whose smaller side is under
    16 pixels (8x8 digits: 4x4 = 16 patches), else 4 (28x28: 49 patches, 32x32: 64), halved
    until it divides both sides."""
    h, w = image_hw(image_size)
    patch = 2 if min(h, w) < 16 else 4
    while patch > 1 and (h % patch or w % patch):
        patch //= 2
    return patch


def check_vit(name: str, options: Mapping[str, Any]) -> None:
    """``LmcError`` for ViT options out of range: heads not dividing width, a bad
    ``mlp_ratio``, ``pool`` or ``image_size``, or a patch that does not divide the image."""
    check_transformer(name, options)
    pool = options.get("pool", "cls")
    if pool not in POOLS:
        raise LmcError(f"{name}: pool must be one of {', '.join(POOLS)}, got {pool!r}")
    size = options.get("image_size", INPUT_DEFAULTS["image_size"])
    sides = list(size) if isinstance(size, (list, tuple)) else [size]
    if len(sides) not in (1, 2):
        raise LmcError(f"{name}: image_size must be H or [H, W], got {size!r}")
    for side in sides:
        check_int("vit: image_size", side)
    patch = options.get("patch", "auto")
    if patch == "auto":
        return
    check_int("vit: patch", patch)
    h, w = image_hw(size)
    if h % patch or w % patch:
        raise LmcError(
            f"{name}: patch {patch} does not divide the {h}x{w} image; choose a patch size "
            f"that divides {h} and {w}"
        )


def complete_vit(options: dict[str, Any]) -> dict[str, Any]:
    """Resolved options with ``patch = "auto"`` replaced by its value for the image size and
    ``mlp_ratio`` as a float (so 2 and 2.0 give one config)."""
    out = complete_transformer(options)
    if out.get("patch") == "auto" and "image_size" in out:
        out["patch"] = default_patch(out["image_size"])
    return out


def vit_inputs(
    input_shape: Sequence[int], num_classes: int, task: str = "classification"
) -> dict[str, Any]:
    """Options of a ViT read off images (C, H, W): ``in_channels`` = C, ``image_size`` = H
    (or [H, W] when not square)."""
    if len(input_shape) != 3:
        raise LmcError(
            f"vit needs image data (C, H, W); the dataset's examples have shape "
            f"{tuple(input_shape)}"
        )
    c, h, w = (int(v) for v in input_shape)
    return {"in_channels": c, "image_size": h if h == w else [h, w], "num_classes": num_classes}


vit_inputs.keys = ("in_channels", "image_size", "num_classes")  # type: ignore[attr-defined]
vit_inputs.outputs = ("per-example",)  # type: ignore[attr-defined]


class ViT(nn.Module):
    """Patch embedding -> (+ class token) + position embedding -> pre-LN blocks -> LayerNorm
    -> pool -> Linear.

    Input: (n, C, H, W), or anything holding C·H·W values per example (flat 8x8 digits),
    reshaped to (n, C, H, W). The patch embedding is a Conv2d with kernel and stride
    ``patch`` (a Linear map of each patch), giving T = (H / patch)(W / patch) tokens of
    ``width`` features, plus a learned class token in front when ``pool = "cls"``. A learned
    position embedding (one per token) is added. ``pool``: ``cls`` classifies the class
    token's final features, ``mean`` the mean over tokens. Each block: x + attn(LN(x)), then
    x + MLP(LN(x)), MLP hidden size round(mlp_ratio x width). No dropout.

    Module names: ``patch_embed``, parameters ``cls_token`` (1, 1, width; pool = cls only) and
    ``pos_embed`` (1, tokens, width), ``blocks.{i}`` (``norm1``, ``attn.q/k/v/out``,
    ``norm2``, ``mlp.fc1/act/fc2``), ``norm``, ``head``.
    """

    def __init__(
        self,
        *,
        in_channels: int = 3,
        image_size: int | Sequence[int] = 32,
        num_classes: int = 10,
        width: int = 128,
        depth: int = 4,
        heads: int = 4,
        mlp_ratio: float = 2.0,
        patch: int | str = "auto",
        pool: str = "cls",
        activation: str = "gelu",
        bias: bool = True,
    ) -> None:
        super().__init__()
        width = int(width)
        options = dict(
            image_size=image_size, width=width, heads=heads, mlp_ratio=mlp_ratio, patch=patch
        )
        check_vit("vit", {**options, "pool": pool})
        if patch == "auto":
            patch = default_patch(image_size)
        h, w = image_hw(image_size)
        self.in_channels, self.image_hw, self.patch = in_channels, (h, w), int(patch)
        self.width, self.depth, self.pool = width, depth, pool
        tokens = (h // self.patch) * (w // self.patch) + (1 if pool == "cls" else 0)
        self.patch_embed = nn.Conv2d(in_channels, width, self.patch, stride=self.patch, bias=bias)
        if pool == "cls":
            self.cls_token = nn.Parameter(torch.zeros(1, 1, width))
        self.pos_embed = nn.Parameter(torch.zeros(1, tokens, width))
        self.blocks = make_blocks(
            depth,
            width,
            heads,
            mlp_ratio,
            activation=activation,
            bias=bias,
            causal=False,
            fused=False,
        )
        self.norm = nn.LayerNorm(width, bias=bias)
        self.head = nn.Linear(width, num_classes, bias=bias)
        self.lmc_init(None)

    @torch.no_grad()
    def lmc_init(self, generator: torch.Generator | None) -> None:
        """Class token and position embedding ~ N(0, 0.02²) (called by ``initialize``)."""
        for param in (getattr(self, "cls_token", None), self.pos_embed):
            if param is not None:
                normal_draw_(param, POSITION_STD, generator)

    @property
    def tokens(self) -> int:
        """Tokens in the residual stream (patches, plus the class token with pool = cls)."""
        return self.pos_embed.shape[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], self.in_channels, self.image_hw[0], self.image_hw[1])
        x = self.patch_embed(x).flatten(2).transpose(1, 2)  # (n, patches, width)
        if self.pool == "cls":
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = self.norm(self.blocks(x + self.pos_embed))
        x = x[:, 0] if self.pool == "cls" else x.mean(dim=1)
        return self.head(x)

    def probe_points(self) -> list[ProbePoint]:
        """``mlp{i}`` and ``block{i}`` per block (see
        :func:`lmc.models.transformer.block_probe_points`: tokens are positions), then the
        ``logits`` (n, classes)."""
        points = block_probe_points(self.depth)
        points.append(logits_probe_point(self.depth))
        return points


@register_model(
    "vit",
    **pre_ln_entry(
        vit_inputs,
        depth=4,
        mlp_ratio=2.0,
        options={
            "patch": ModelOption(
                "auto",
                "patch size, dividing the image's sides",
                type=int,
                default_text="2 below 16 pixels, else 4",
            ),
            "pool": ModelOption(
                "cls", "classify the class token (cls) or the mean over tokens", choices=POOLS
            ),
        },
    ),
    description="Vision Transformer: width is the embedding dimension, depth the blocks",
    check=check_vit,
    complete=complete_vit,
)
def vit(**options) -> ViT:
    return ViT(**options)


__all__ = ["POOLS", "ViT", "default_patch", "vit_inputs"]
