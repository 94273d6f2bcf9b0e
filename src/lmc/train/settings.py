"""Training settings: everything that changes the weights, and nothing that doesn't."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import torch

from lmc.config import LmcError
from lmc.config.precision import PRECISIONS, TRAINED_PRECISIONS, resolve_precision
from lmc.config.validate import check_int, check_number

#: The optimizers :class:`TrainSettings` accepts (``optimizer``).
OPTIMIZERS = ("sgd", "adam", "adamw")
#: The learning-rate schedules :class:`TrainSettings` accepts (``schedule``).
SCHEDULES = ("cosine", "onecycle", "constant")
__all__ = ["OPTIMIZERS", "PRECISIONS", "SCHEDULES", "TRAINED_PRECISIONS", "TrainSettings"]


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
        precision: ``fp32`` (plain float32), ``bf16`` (automatic mixed precision: the training
            forward pass and loss run under ``torch.autocast`` in bfloat16 on CPU or CUDA; the
            weights, gradients and optimizer state stay float32, and the loss itself is taken in
            float32) or ``auto`` (the default): ``bf16`` where bfloat16 is native on the training
            device and measured faster, else ``fp32`` (:mod:`lmc.config.precision`). Evaluation
            and all metrics are float32 either way. It changes the weights, so it is part of the
            run's config and identity, which holds the resolved ``fp32`` or ``bf16``, never
            ``auto`` (:meth:`to_dict`): an ``auto`` run resolved to fp32 is the explicit fp32 run.
            ``bf16`` on a device that only emulates bfloat16 warns before training.
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
    precision: str = "auto"

    def __post_init__(self) -> None:
        for key, choices in (
            ("optimizer", OPTIMIZERS),
            ("schedule", SCHEDULES),
            ("precision", PRECISIONS),
        ):
            value = getattr(self, key)
            if value not in choices:
                raise LmcError(f"unknown {key} {value!r}: choose {', '.join(choices)}")
        check_int("epochs", self.epochs, minimum=1)
        check_int("batch_size", self.batch_size, minimum=1)
        check_number("lr", self.lr, positive=True)
        # Momentum (SGD) or beta1 (Adam/AdamW) lies in [0, 1); label smoothing in [0, 1).
        check_number("momentum", self.momentum, minimum=0.0)
        if self.momentum >= 1:
            raise LmcError(f"momentum must be below 1, got {self.momentum:g}")
        check_number("weight_decay", self.weight_decay, minimum=0.0)
        check_number("warmup_epochs", self.warmup_epochs, minimum=0.0)
        if self.warmup_epochs > self.epochs:
            raise LmcError(
                f"warmup_epochs ({self.warmup_epochs:g}) exceeds the {self.epochs} training epochs"
            )
        check_number("label_smoothing", self.label_smoothing, minimum=0.0)
        if self.label_smoothing >= 1:
            raise LmcError(f"label_smoothing must be below 1, got {self.label_smoothing:g}")
        if self.augment is not None and not isinstance(self.augment, bool):
            raise LmcError(f"augment must be true, false or unset, got {self.augment!r}")
        check_int("init_seed", self.init_seed, minimum=0)
        check_int("data_seed", self.data_seed, minimum=0)
        # Floats given as ints (lr = 1 in a TOML file) are stored as floats, so the same
        # settings always hash alike.
        for key in ("lr", "momentum", "weight_decay", "warmup_epochs", "label_smoothing"):
            object.__setattr__(self, key, float(getattr(self, key)))

    def resolved(self, device: str | torch.device | None = None) -> TrainSettings:
        """These settings with ``precision`` resolved to ``fp32`` or ``bf16`` for ``device``
        (default: the training device, :func:`lmc.config.precision.training_device`, else the
        CPU; :func:`lmc.config.precision.resolve_precision`, which warns where bf16 is
        emulated)."""
        return replace(self, precision=resolve_precision(self.precision, device))

    def to_dict(self) -> dict[str, Any]:
        """The settings as a run's config records them: ``precision`` resolved
        (:meth:`resolved`), so the config hash never holds ``auto``."""
        return asdict(self.resolved())

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
