"""Factories for the building blocks shared by every zoo model."""

from __future__ import annotations

from torch import nn

from lmc.config import LmcError

from .options import ModelOption

ACTIVATIONS = ("relu", "gelu", "tanh", "sigmoid", "leaky_relu")
NORMS = ("none", "batch", "layer")


def norm_option(default: str) -> ModelOption:
    """The ``norm`` option (:func:`make_norm`) with ``default``."""
    return ModelOption(default, "normalisation", choices=NORMS)


def activation_option(default: str) -> ModelOption:
    """The ``activation`` option (:func:`make_activation`) with ``default``."""
    return ModelOption(default, "activation", choices=ACTIVATIONS)


#: ``bias``: on by default; ``lmc train --no-bias`` turns it off.
BIAS_OPTION = ModelOption(
    True,
    "biases in the Linear/Conv layers; --no-bias drops them (the width paper's theory setting)",
    flag="--no-bias",
)
# the options of the convolutional zoo models (BatchNorm, as Git Re-Basin and the width paper)
CNN_OPTIONS = {"norm": norm_option("batch"), "activation": activation_option("relu"),
               "bias": BIAS_OPTION}  # fmt: skip


def make_activation(name: str) -> nn.Module:
    """A fresh activation module (one instance per use, so hooks can tell layers apart)."""
    if name == "relu":
        return nn.ReLU()
    if name == "gelu":
        return nn.GELU()
    if name == "tanh":
        return nn.Tanh()
    if name == "sigmoid":
        return nn.Sigmoid()
    if name == "leaky_relu":
        return nn.LeakyReLU(0.01)
    raise LmcError(f"unknown activation {name!r}: choose one of {', '.join(ACTIVATIONS)}")


def make_norm(name: str, channels: int, *, spatial: bool) -> nn.Module:
    """A normalisation layer over ``channels`` features.

    ``batch``: BatchNorm1d (flat) or BatchNorm2d (images).
    ``layer``: LayerNorm over the features (flat), or for images GroupNorm(1, C), i.e. layer norm
    over (C, H, W) with a per-channel affine, which commutes with channel permutations.
    ``none``: identity.
    """
    if name == "none":
        return nn.Identity()
    if name == "batch":
        return nn.BatchNorm2d(channels) if spatial else nn.BatchNorm1d(channels)
    if name == "layer":
        return nn.GroupNorm(1, channels) if spatial else nn.LayerNorm(channels)
    raise LmcError(f"unknown norm {name!r}: choose one of {', '.join(NORMS)}")


def scaled(base: int, width: float) -> int:
    """Channels of a layer with ``base`` channels at width multiplier ``width`` (at least 1)."""
    if width <= 0:
        raise LmcError(f"width must be positive, got {width}")
    return max(1, int(round(base * width)))
