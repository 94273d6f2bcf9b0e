"""A model defined in your own file: what ``lmc ... --model-factory model.py:make`` builds.

``TinyNet`` is a plain ``nn.Module`` (nothing from lmc): an MLP with two hidden ReLU layers
on 8×8 digits, taking images ``(N, 1, 8, 8)`` and returning logits ``(N, 10)``. ``make()`` is
the zero-argument factory lmc calls once per checkpoint before loading its weights.
"""

from __future__ import annotations

from torch import nn


class TinyNet(nn.Module):
    def __init__(self, inputs: int = 64, hidden: int = 128, classes: int = 10) -> None:
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(inputs, hidden)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(hidden, hidden)
        self.act2 = nn.ReLU()
        self.out = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.out(self.act2(self.fc2(self.act1(self.fc1(self.flatten(x))))))


def make() -> TinyNet:
    return TinyNet()
