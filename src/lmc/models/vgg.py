"""VGG-11 and VGG-16 for small images."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import nn

from .layers import CNN_OPTIONS, make_activation, make_norm, scaled
from .probes import ProbePoint
from .registry import image_inputs, register_model

# Standard base widths; "M" is a 2x2 max-pool. Width multiplier w scales every conv's channels.
CONFIGS: dict[str, list[int | str]] = {
    "vgg11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg16": [
        64,
        64,
        "M",
        128,
        128,
        "M",
        256,
        256,
        256,
        "M",
        512,
        512,
        512,
        "M",
        512,
        512,
        512,
        "M",
    ],
}


class VGG(nn.Module):
    """VGG features (3x3 conv -> norm -> activation, max-pools) -> global average pool -> Linear.

    Pools use ``ceil_mode`` so any input of at least 1x1 works (8x8 digits, 28x28 MNIST, 32x32
    CIFAR). Module names in ``features``: ``conv{i}``, ``norm{i}``, ``act{i}``, ``pool{j}``;
    the logits layer is ``classifier``.
    """

    def __init__(
        self,
        config: str,
        *,
        in_channels: int = 3,
        num_classes: int = 10,
        width: float = 1.0,
        norm: str = "batch",
        activation: str = "relu",
        bias: bool = True,
    ) -> None:
        super().__init__()
        layers: list[tuple[str, nn.Module]] = []
        self._convs = 0
        pools = 0
        channels = in_channels
        for item in CONFIGS[config]:
            if item == "M":
                pools += 1
                layers.append((f"pool{pools}", nn.MaxPool2d(2, ceil_mode=True)))
                continue
            self._convs += 1
            i = self._convs
            out = scaled(int(item), width)
            layers.append((f"conv{i}", nn.Conv2d(channels, out, 3, padding=1, bias=bias)))
            layers.append((f"norm{i}", make_norm(norm, out, spatial=True)))
            layers.append((f"act{i}", make_activation(activation)))
            channels = out
        self.features = nn.Sequential()
        for name, module in layers:
            self.features.add_module(name, module)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.classifier = nn.Linear(channels, num_classes, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.flatten(self.pool(self.features(x))))

    def probe_points(self) -> list[ProbePoint]:
        points = [
            ProbePoint(
                f"layer{i}",
                i,
                "hidden",
                f"features.act{i}",
                f"features.conv{i}",
                f"features.act{i}",
            )
            for i in range(1, self._convs + 1)
        ]
        points.append(ProbePoint("logits", self._convs + 1, "logits", "classifier", "classifier"))
        return points


def _register(config: str, label: str) -> Callable[..., nn.Module]:
    """Registers ``VGG(config, **options)`` as zoo model ``config`` and returns its factory."""
    return register_model(
        config,
        width="multiplier",
        default_width=1.0,
        inputs=image_inputs,
        options=CNN_OPTIONS,
        description=f"{label}: width multiplies the channels 64, 128, 256, 512",
    )(functools.partial(VGG, config))


vgg11 = _register("vgg11", "VGG-11")
vgg16 = _register("vgg16", "VGG-16")
