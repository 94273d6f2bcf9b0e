"""Multilayer perceptron."""

from __future__ import annotations

import math

import torch
from torch import nn

from .layers import BIAS_OPTION, activation_option, make_activation, make_norm, norm_option
from .options import ModelOption
from .probes import ProbePoint
from .registry import register_model, vector_inputs


class MLP(nn.Module):
    """Flatten -> [Linear -> norm -> activation] x depth -> Linear (logits).

    Module names: ``fc1..fc{depth}``, ``norm1..``, ``act1..`` and ``out`` (the logits layer).
    ``width`` is the number of hidden units of every hidden layer.
    """

    def __init__(
        self,
        *,
        input_size: int,
        num_classes: int = 10,
        width: int = 512,
        depth: int = 3,
        norm: str = "none",
        activation: str = "relu",
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.depth = depth
        self.flatten = nn.Flatten()
        fan_in = input_size
        for i in range(1, depth + 1):
            setattr(self, f"fc{i}", nn.Linear(fan_in, width, bias=bias))
            setattr(self, f"norm{i}", make_norm(norm, width, spatial=False))
            setattr(self, f"act{i}", make_activation(activation))
            fan_in = width
        self.out = nn.Linear(fan_in, num_classes, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.flatten(x)
        for i in range(1, self.depth + 1):
            x = getattr(self, f"act{i}")(getattr(self, f"norm{i}")(getattr(self, f"fc{i}")(x)))
        return self.out(x)

    def probe_points(self) -> list[ProbePoint]:
        points = [
            ProbePoint(f"layer{i}", i, "hidden", f"act{i}", f"fc{i}", f"act{i}")
            for i in range(1, self.depth + 1)
        ]
        points.append(ProbePoint("logits", self.depth + 1, "logits", "out", "out", None))
        return points


@register_model(
    "mlp",
    width="units",
    default_width=512,
    inputs=vector_inputs,
    options={
        "depth": ModelOption(3, "number of hidden layers"),
        "norm": norm_option("none"),
        "activation": activation_option("relu"),
        "bias": BIAS_OPTION,
    },
    description="multilayer perceptron: depth hidden layers of width units",
)
def mlp(*, input_size: int | tuple[int, ...] = 64, **options) -> MLP:
    if isinstance(input_size, (tuple, list)):
        input_size = math.prod(input_size)
    return MLP(input_size=int(input_size), **options)
