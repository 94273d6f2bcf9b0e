"""Training settings: everything that changes the weights, and nothing that doesn't."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from lmc.config import LmcError

OPTIMIZERS = ("sgd", "adam", "adamw")
SCHEDULES = ("cosine", "onecycle", "constant")
PRECISIONS = ("fp32", "bf16")


@dataclass(frozen=True)
class TrainSettings:
    """The training recipe.

    Attributes:
        epochs: passes over the training split.
        batch_size: examples per step (the last partial batch is dropped).
        optimizer: ``sgd`` (heavy-ball momentum, coupled L2 weight decay), ``adam`` (coupled L2)
            or ``adamw`` (decoupled weight decay).
        lr: peak learning rate.
        momentum: SGD momentum (beta1 for Adam/AdamW).
        weight_decay: the width paper's default is 3e-3; its ablation uses 1e-4.
        schedule: ``cosine`` (linear warm-up for ``warmup_epochs`` then cosine to 0),
            ``onecycle`` (linear up to ``lr`` over the first 30% of steps, then linear down to 0)
            or ``constant`` (after warm-up).
        warmup_epochs: linear warm-up length (cosine and constant schedules); may be fractional.
        label_smoothing: cross-entropy label smoothing (0 = off).
        augment: random crop + flip; ``None`` uses the dataset's default (on for CIFAR).
        init_seed: seeds the weights. data_seed: seeds the data order and augmentation.
        precision: ``fp32`` (plain float32) or ``bf16`` (automatic mixed precision: the training
            forward pass and loss run under ``torch.autocast`` in bfloat16 on CPU or CUDA; the
            weights, gradients and optimizer state stay float32, and the loss itself is taken in
            float32). Evaluation and all metrics are float32 either way. It changes the weights,
            so it is part of the run's config and identity.
    """

    epochs: int = 10
    batch_size: int = 64
    optimizer: str = "sgd"
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 3e-3
    schedule: str = "cosine"
    warmup_epochs: float = 0.0
    label_smoothing: float = 0.0
    augment: bool | None = None
    init_seed: int = 0
    data_seed: int = 0
    precision: str = "fp32"

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise LmcError(f"unknown optimizer {self.optimizer!r}: choose {', '.join(OPTIMIZERS)}")
        if self.schedule not in SCHEDULES:
            raise LmcError(f"unknown schedule {self.schedule!r}: choose {', '.join(SCHEDULES)}")
        if self.precision not in PRECISIONS:
            raise LmcError(f"unknown precision {self.precision!r}: choose {', '.join(PRECISIONS)}")
        if self.epochs < 1:
            raise LmcError(f"epochs must be at least 1, got {self.epochs}")
        if self.batch_size < 1:
            raise LmcError(f"batch size must be at least 1, got {self.batch_size}")
        if self.lr <= 0:
            raise LmcError(f"learning rate must be positive, got {self.lr}")
        if self.weight_decay < 0:
            raise LmcError(f"weight decay must be >= 0, got {self.weight_decay}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainSettings:
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise LmcError(
                f"unknown training setting {sorted(unknown)[0]!r}: "
                f"known are {', '.join(sorted(names))}"
            )
        return cls(**data)
