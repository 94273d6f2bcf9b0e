"""Small helpers about a module's state that every later package needs: its device, and
saving and restoring the train/eval flags of all its submodules around a computation."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn


def module_device(model: nn.Module) -> torch.device:
    """The device of ``model``'s first parameter or buffer (CPU for a module without any)."""
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")


@contextmanager
def preserved_modes(*models: nn.Module) -> Iterator[None]:
    """Restore every submodule's ``training`` flag of ``models`` on exit (the body may change
    them, e.g. to put only BatchNorm layers in train mode)."""
    saved = [(m, m.training) for model in models for m in model.modules()]
    try:
        yield
    finally:
        for module, training in saved:
            module.training = training


@contextmanager
def eval_mode(*models: nn.Module) -> Iterator[None]:
    """Put ``models`` in eval mode and restore each submodule's training flag afterwards."""
    with preserved_modes(*models):
        for model in models:
            model.eval()
        yield
