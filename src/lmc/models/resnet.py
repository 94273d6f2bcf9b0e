"""ResNet-20 for small images (He et al. 2016, CIFAR variant)."""

from __future__ import annotations

import torch
from torch import nn

from .layers import CNN_OPTIONS, make_activation, make_norm, scaled
from .probes import ProbePoint
from .registry import image_inputs, register_model

BASE_WIDTHS = (16, 32, 64)
BLOCKS_PER_STAGE = 3


class BasicBlock(nn.Module):
    """conv3x3 -> norm -> act -> conv3x3 -> norm, plus shortcut, then act.

    The shortcut is the identity, or a 1x1 conv + norm where the shape changes.
    """

    def __init__(
        self, cin: int, cout: int, stride: int, norm: str, activation: str, bias: bool
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=bias)
        self.norm1 = make_norm(norm, cout, spatial=True)
        self.act1 = make_activation(activation)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=bias)
        self.norm2 = make_norm(norm, cout, spatial=True)
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=bias),
                make_norm(norm, cout, spatial=True),
            )
        else:
            self.shortcut = nn.Identity()
        self.act2 = make_activation(activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.act1(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return self.act2(out + self.shortcut(x))


class ResNet20(nn.Module):
    """ResNet-20: a 3x3 stem, three stages of three basic blocks, global pool, Linear.

    Stage widths are ``width`` x (16, 32, 64) channels; stages 2 and 3 halve the resolution.
    Module names: ``stem``, ``stem_norm``, ``stem_act``, ``stage{s}.{b}`` blocks, ``out``.
    """

    def __init__(
        self,
        *,
        in_channels: int = 3,
        num_classes: int = 10,
        width: float = 1.0,
        norm: str = "batch",
        activation: str = "relu",
        bias: bool = True,
    ) -> None:
        super().__init__()
        widths = [scaled(b, width) for b in BASE_WIDTHS]
        self.stem = nn.Conv2d(in_channels, widths[0], 3, padding=1, bias=bias)
        self.stem_norm = make_norm(norm, widths[0], spatial=True)
        self.stem_act = make_activation(activation)
        cin = widths[0]
        for s, cout in enumerate(widths, start=1):
            blocks = nn.Sequential()
            for b in range(BLOCKS_PER_STAGE):
                stride = 2 if (s > 1 and b == 0) else 1
                blocks.add_module(str(b), BasicBlock(cin, cout, stride, norm, activation, bias))
                cin = cout
            setattr(self, f"stage{s}", blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.out = nn.Linear(cin, num_classes, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem_act(self.stem_norm(self.stem(x)))
        x = self.stage3(self.stage2(self.stage1(x)))
        return self.out(self.flatten(self.pool(x)))

    def probe_points(self) -> list[ProbePoint]:
        points = [ProbePoint("stem", 1, "hidden", "stem_act", "stem", "stem_act")]
        layer = 1
        k = 0
        for s in range(1, len(BASE_WIDTHS) + 1):
            for b in range(BLOCKS_PER_STAGE):
                layer += 2
                k += 1
                points.append(
                    ProbePoint(
                        f"block{k}", layer, "block", f"stage{s}.{b}", None, f"stage{s}.{b}.act2"
                    )
                )
        points.append(ProbePoint("logits", layer + 1, "logits", "out", "out"))
        return points


@register_model(
    "resnet20",
    width="multiplier",
    default_width=1.0,
    inputs=image_inputs,
    options=CNN_OPTIONS,
    description="ResNet-20: width multiplies the stage channels 16, 32, 64",
)
def resnet20(**options) -> ResNet20:
    return ResNet20(**options)
