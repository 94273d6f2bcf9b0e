"""Learning-rate schedules as pure functions of the global step (so resuming needs no state)."""

from __future__ import annotations

import math

from .settings import TrainSettings


def learning_rate(settings: TrainSettings, step: int, steps_per_epoch: int) -> float:
    """The learning rate at global step ``step`` (0-based) of ``settings.epochs`` epochs."""
    total = max(1, settings.epochs * steps_per_epoch)
    if settings.schedule == "onecycle":
        peak = max(1, int(0.3 * total))
        if step < peak:
            return settings.lr * (step + 1) / peak
        return settings.lr * max(0.0, (total - step) / max(1, total - peak))
    warmup = int(round(settings.warmup_epochs * steps_per_epoch))
    if step < warmup:
        return settings.lr * (step + 1) / warmup
    if settings.schedule == "constant":
        return settings.lr
    progress = (step - warmup) / max(1, total - warmup)
    return settings.lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
