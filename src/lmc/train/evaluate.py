"""Loss and accuracy of a model on tensors."""

from __future__ import annotations

import torch
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
    """The task's mean loss (cross-entropy in nats for classification and next-token) and
    accuracy (a fraction; ``None`` for a task without one) of ``model`` in eval mode.

    ``task`` (:mod:`lmc.data.tasks`) computes both (:meth:`lmc.data.tasks.Task.loss_sum`,
    :meth:`lmc.data.tasks.Task.correct_count`), over every prediction (next-token: every
    position of every window, nats per token). The model's train/eval mode is restored
    afterwards.
    """
    with eval_mode(model):
        return _evaluate(model, x, y, batch_size, get_task(task))


def _evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int, task: Task):
    loss_sum = torch.zeros((), dtype=torch.float64, device=x.device)
    correct: torch.Tensor | None = torch.zeros((), dtype=torch.int64, device=x.device)
    for start in range(0, len(x), batch_size):
        output, target = model(x[start : start + batch_size]), y[start : start + batch_size]
        loss_sum += task.loss_sum(output, target)
        hits = task.correct_count(output, target)
        correct = None if hits is None or correct is None else correct + hits
    n = max(1, task.num_predictions(y))
    accuracy = None if correct is None else correct.item() / n
    return {"loss": loss_sum.item() / n, "accuracy": accuracy}
