"""Batched path evaluation (:func:`lmc.metrics.engine.stacked_logits`) on a model that registers
one submodule under two names: the batched logits are each state's own, and the model is left
as it was (a second swap of the shared attribute used to leave vmapped tensors in it)."""

from __future__ import annotations

import torch
from torch import nn

from lmc.metrics.engine import one_name_per_slot, stacked_logits


class SharedBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.block = nn.Linear(8, 8)
        self.again = self.block  # one module, two names in the state dict
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x))
        h = torch.relu(self.block(h))
        return self.head(torch.relu(self.again(h)))


def test_one_name_is_kept_per_module_attribute():
    model = SharedBlock()
    names = list(model.state_dict())
    assert "again.weight" in names and "block.weight" in names
    kept = one_name_per_slot(model, names)
    assert "block.weight" in kept and "again.weight" not in kept
    assert len(kept) == len(names) - 2


def test_batched_logits_of_a_model_with_a_shared_submodule():
    torch.manual_seed(0)
    model = SharedBlock().eval()
    other = SharedBlock().eval()
    x = torch.randn(5, 4)
    before = model(x)
    states = [model.state_dict(), other.state_dict()]
    stacked = {k: torch.stack([s[k] for s in states]) for k in states[0]}
    z = stacked_logits(model, stacked, x, batch_size=2, device=torch.device("cpu"))
    assert torch.allclose(z[0], model(x), atol=1e-6)
    assert torch.allclose(z[1], other(x), atol=1e-6)
    # the model still runs on its own weights afterwards
    assert torch.equal(model(x), before)
    assert isinstance(model.block.weight, nn.Parameter)
