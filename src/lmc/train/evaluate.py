"""Loss and accuracy of a model on tensors."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lmc.data.tasks import Task, get_task
from lmc.models import eval_mode


@torch.no_grad()
def evaluate(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    batch_size: int = 1024,
    task: Task | str = "classification",
) -> dict[str, float]:
    """Mean cross-entropy (nats) and accuracy (fraction) of ``model`` in eval mode.

    ``task`` (:mod:`lmc.data.tasks`): both are over every prediction (next-token: every
    position of every window, nats per token). The model's train/eval mode is restored
    afterwards.
    """
    with eval_mode(model):
        return _evaluate(model, x, y, batch_size, get_task(task))


def _evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int, task: Task):
    loss_sum = torch.zeros((), dtype=torch.float64, device=x.device)
    correct = torch.zeros((), dtype=torch.int64, device=x.device)
    for start in range(0, len(x), batch_size):
        logits, target = task.flatten(
            model(x[start : start + batch_size]), y[start : start + batch_size]
        )
        loss_sum += F.cross_entropy(logits.float(), target, reduction="sum").double()
        correct += (logits.argmax(1) == target).sum()
    n = max(1, len(x) * task.predictions_per_example(y))
    return {"loss": loss_sum.item() / n, "accuracy": correct.item() / n}
