"""Models defined only for the permutation tests, handed out by the ``extra_models`` fixture."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn


class ResidualCNN(nn.Module):
    """A user-style residual CNN: conv-bn-relu stem, two residual blocks (identity and
    projection shortcut), a per-channel parameter used through ``get_attr``, a channel
    ``cat`` with a side branch, functional ops, and a Linear after flattening (C, 4, 4)."""

    def __init__(self, in_channels: int = 1, bias: bool = True) -> None:
        super().__init__()
        self.stem = nn.Conv2d(in_channels, 8, 3, padding=1, bias=bias)
        self.stem_bn = nn.BatchNorm2d(8)
        self.b1c1 = nn.Conv2d(8, 8, 3, padding=1, bias=bias)
        self.b1n1 = nn.BatchNorm2d(8)
        self.b1c2 = nn.Conv2d(8, 8, 3, padding=1, bias=bias)
        self.b1n2 = nn.GroupNorm(1, 8)
        self.b2c1 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=bias)
        self.b2n1 = nn.BatchNorm2d(16)
        self.b2c2 = nn.Conv2d(16, 16, 3, padding=1, bias=bias)
        self.proj = nn.Conv2d(8, 16, 1, stride=2, bias=bias)
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 16).reshape(1, 16, 1, 1))
        self.branch = nn.Conv2d(16, 4, 1, bias=bias)
        self.drop = nn.Dropout(0.1)
        self.head = nn.Linear(20 * 4 * 4, 10, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.stem_bn(self.stem(x)))
        h = F.gelu(self.b1n1(self.b1c1(x)))
        x = torch.relu(x + self.b1n2(self.b1c2(h)))
        h = self.b2n1(self.b2c1(x)).relu()
        x = F.leaky_relu(self.b2c2(h) + self.proj(x)) * self.scale
        y = torch.cat([x, torch.sigmoid(self.branch(x))], dim=1)
        y = F.avg_pool2d(y, 1)
        return self.head(self.drop(torch.flatten(y, 1)))


class WithUnknownModule(nn.Module):
    """An MLP-like model with a module the tracer does not know (ChannelShuffle) in the middle
    and a function that breaks channel order (``torch.roll``)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.shuffle = nn.ChannelShuffle(2)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.conv3 = nn.Conv2d(8, 8, 3, padding=1)
        self.conv4 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(self.conv1(x))
        x = torch.tanh(self.conv2(self.shuffle(x)))  # conv1's and conv2's input must stay fixed
        x = torch.tanh(self.conv3(x))  # conv2 -> conv3 is an ordinary group
        x = torch.roll(torch.tanh(self.conv4(x)), 1, dims=1)  # conv4's output must stay fixed
        return self.fc(x.mean(dim=(2, 3)))


class TwoOutputs(nn.Module):
    """Returns the logits and a hidden feature: the hidden group reaches the output."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 12)
        self.fc2 = nn.Linear(12, 12)
        self.out = nn.Linear(12, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(self.fc1(x))
        z = torch.relu(self.fc2(h))
        return self.out(z), h


class GroupedNorm(nn.Module):
    """GroupNorm with 2 groups of 4 channels: permutations would mix groups."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.gn = nn.GroupNorm(2, 8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.gn(self.conv1(x)))
        x = torch.relu(self.conv2(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


@pytest.fixture(scope="session")
def extra_models() -> SimpleNamespace:
    return SimpleNamespace(
        ResidualCNN=ResidualCNN,
        WithUnknownModule=WithUnknownModule,
        TwoOutputs=TwoOutputs,
        GroupedNorm=GroupedNorm,
    )
