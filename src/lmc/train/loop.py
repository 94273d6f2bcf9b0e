"""The training loop: seeded, resumable, fast on CPU and GPU."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from lmc.config import LmcError, progress
from lmc.config.precision import resolve_precision
from lmc.data import Dataset, batches, random_crop_flip

from .evaluate import evaluate
from .schedule import learning_rate
from .settings import TrainSettings

EpochCallback = Callable[[int, nn.Module, torch.optim.Optimizer, list], None]

_ORDER_SALT = 0x5EED
_AUGMENT_SALT = 0xA06


def epoch_generator(data_seed: int, epoch: int, salt: int) -> torch.Generator:
    """The CPU generator for one epoch's data order (or augmentation): a function of the seeds
    and the epoch only, so a resumed run draws exactly what an uninterrupted one would."""
    return torch.Generator().manual_seed((data_seed * 1_000_003 + epoch * 7_919 + salt) % 2**63)


def autocast_context(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The context a training forward pass runs in for ``precision`` on ``device``.

    ``fp32`` is a no-op; ``bf16`` is ``torch.autocast`` to bfloat16 (CPU or CUDA), which keeps
    the float32 weights and casts per op (matmuls and convolutions run in bfloat16); ``auto``
    is first resolved for ``device`` (:func:`lmc.config.precision.resolve_precision`).
    """
    if precision == "auto":
        precision = resolve_precision(precision, device)
    if precision == "fp32":
        return contextlib.nullcontext()
    if precision == "bf16":
        if device.type not in ("cpu", "cuda"):
            raise LmcError(f"precision 'bf16' needs a CPU or CUDA device, not {device.type!r}")
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    raise LmcError(f"unknown precision {precision!r}")


def _decay_budget(history: list[dict], epoch: int, spent: float) -> float | None:
    """Σ_t lr_t·wd from step 0 to the end of 0-based ``epoch``: the previous record's budget
    plus ``spent`` (this epoch's); ``None`` when the history before it lacks one (a checkpoint
    of an older version). Definition: docs/science.md, "Initialisation retention"."""
    if epoch == 0:
        return 0.0 + spent
    before = history[-1].get("decay_budget") if len(history) == epoch else None
    return None if before is None else before + spent


def make_optimizer(model: nn.Module, settings: TrainSettings, device: torch.device):
    """SGD (momentum, coupled weight decay), Adam (coupled) or AdamW (decoupled).

    Uses the fused kernels where PyTorch has them for ``device``.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    fused = device.type in ("cpu", "cuda")
    kwargs: dict[str, Any] = {"lr": settings.lr, "weight_decay": settings.weight_decay}
    if settings.optimizer == "sgd":
        cls, kwargs["momentum"] = torch.optim.SGD, settings.momentum
    else:
        cls = torch.optim.Adam if settings.optimizer == "adam" else torch.optim.AdamW
        kwargs["betas"] = (settings.momentum, 0.999)
    try:
        return cls(params, fused=fused, **kwargs)
    except (RuntimeError, TypeError):
        return cls(params, **kwargs)


def fit(
    model: nn.Module,
    dataset: Dataset,
    settings: TrainSettings,
    *,
    device: str | torch.device = "cpu",
    quiet: bool = True,
    start_epoch: int = 0,
    stop_epoch: int | None = None,
    optimizer_state: dict | None = None,
    history: list[dict] | None = None,
    on_epoch_end: EpochCallback | None = None,
    evaluate_test: bool = True,
) -> list[dict]:
    """Train ``model`` in place on ``dataset`` with ``settings``; return the per-epoch history.

    Epochs ``start_epoch`` .. ``stop_epoch - 1`` (0-based; ``stop_epoch`` defaults to
    ``settings.epochs``) are run, so training can resume from a checkpoint
    (``optimizer_state`` and ``history`` from it) and end bit-identical on CPU. Each history entry
    holds ``epoch`` (1-based), the running ``train_loss``/``train_accuracy`` over the epoch's
    batches, ``test_loss``/``test_accuracy``, ``lr`` at the epoch's end, ``seconds`` and
    ``decay_budget`` (Σ_t lr_t·wd over every step so far, from step 0).
    With ``settings.precision == "bf16"`` the forward pass runs under bfloat16 autocast; the
    loss is taken in float32 on float32 logits, and the weights, gradients, optimizer state and
    the per-epoch evaluation stay float32. ``auto`` is resolved for ``device`` first, and
    ``bf16`` on a device that only emulates bfloat16 warns (once per process) before the first
    step (:func:`lmc.config.precision.resolve_precision`).
    The loss, accuracy and their per-batch counts are the dataset's task's
    (:mod:`lmc.data.tasks`, ``dataset.task``): for ``next-token`` the mean cross-entropy over
    every position (nats per token) and the fraction of positions predicted, with running
    means weighted by positions.
    Raises ``LmcError`` when the loss becomes NaN or infinite.
    """
    device = torch.device(device)
    model.to(device)
    data = dataset.to(device)
    task = data.task_spec
    stop_epoch = settings.epochs if stop_epoch is None else stop_epoch
    augment = data.augment if settings.augment is None else settings.augment
    optimizer = make_optimizer(model, settings, device)
    autocast = autocast_context(resolve_precision(settings.precision, device), device)
    if optimizer_state is not None:
        optimizer.load_state_dict(optimizer_state)
    history = list(history or [])
    n = len(data.x_train)
    batch_size = min(settings.batch_size, n)
    steps_per_epoch = n // batch_size
    epochs = progress(range(start_epoch, stop_epoch), quiet=quiet, desc="epochs", unit="epoch")
    for epoch in epochs:
        start = time.perf_counter()
        model.train()
        order = epoch_generator(settings.data_seed, epoch, _ORDER_SALT)
        aug_gen = epoch_generator(settings.data_seed, epoch, _AUGMENT_SALT)
        loss_sum = torch.zeros((), device=device)
        correct: torch.Tensor | None = torch.zeros((), dtype=torch.int64, device=device)
        seen = 0
        step = epoch * steps_per_epoch
        lr, lr_sum = settings.lr, 0.0  # lr_sum: Σ lr_t over this epoch's steps (decay budget)
        for idx in batches(
            n, batch_size, generator=order, shuffle=True, drop_last=True, device=device
        ):
            lr = learning_rate(settings, step, steps_per_epoch)
            for group in optimizer.param_groups:
                group["lr"] = lr
            lr_sum += lr
            x, y = data.x_train[idx], data.y_train[idx]
            if augment:
                x = random_crop_flip(x, aug_gen)
            with autocast:
                logits = model(x).float()
            loss = task.loss(logits, y, label_smoothing=settings.label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            count = task.num_predictions(y)  # the batch's predictions
            loss_sum += loss.detach() * count
            hits = task.correct_count(logits.detach(), y)
            correct = None if hits is None or correct is None else correct + hits
            seen += count
            step += 1
        train_loss = loss_sum.item() / max(1, seen)
        if not math.isfinite(train_loss):
            raise LmcError(
                f"the training loss became {train_loss} in epoch {epoch + 1}: "
                "lower the learning rate (--lr) or the weight decay"
            )
        record: dict[str, Any] = {
            "epoch": epoch + 1,
            "train_loss": train_loss,
            "train_accuracy": None if correct is None else correct.item() / max(1, seen),
            "lr": lr,
            "decay_budget": _decay_budget(history, epoch, lr_sum * settings.weight_decay),
        }
        if evaluate_test:
            test = evaluate(model, data.x_test, data.y_test, task=task)
            record["test_loss"], record["test_accuracy"] = test["loss"], test["accuracy"]
        record["seconds"] = time.perf_counter() - start
        history.append(record)
        if not quiet and hasattr(epochs, "set_postfix"):
            # the running loss over the epoch's training batches; the accuracy of the test split
            postfix = {"train loss": f"{train_loss:.3f}"}
            if record.get("test_accuracy") is not None:
                postfix["test acc"] = f"{record['test_accuracy']:.3f}"
            epochs.set_postfix(postfix)
        if on_epoch_end is not None:
            on_epoch_end(epoch + 1, model, optimizer, history)
    model.eval()
    return history
