"""The in-memory dataset record and its per-channel normalisation."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch

from lmc.config import LmcError, resolve_device

from .tasks import Task, get_task

SPLITS = ("train", "test")


@dataclass
class Dataset:
    """A dataset held as tensors on one device: classification or a token task.

    Conventions:

    - ``x_train``/``x_test``: ``float32``, shape ``(N, *input_shape)``. Images are ``(C, H, W)``.
      Both splits are normalised per channel with the *training* split's statistics:
      ``x = (raw - mean[c]) / std[c]`` where the channel ``c`` is the first axis of
      ``input_shape`` (for a flat input ``(D,)`` that is every feature on its own). Raw pixel
      values are scaled to ``[0, 1]`` before normalising, so ``mean``/``std`` are in those units.
    - ``y_train``/``y_test``: ``int64`` class indices in ``[0, num_classes)``, shape ``(N,)``
      for ``classification``; for ``next-token`` the targets ``(N, T)`` (token ids in
      ``[0, num_classes)``, ``num_classes`` being the vocabulary).
    - ``augment``: whether training should use :func:`lmc.data.random_crop_flip` by default.
    - ``task``: the name of the task (:mod:`lmc.data.tasks`: ``classification``, the default,
      or ``next-token``); :attr:`task_spec` is its :class:`lmc.data.tasks.Task`.
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    input_shape: tuple[int, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    augment: bool
    task: str = "classification"

    @property
    def task_spec(self) -> Task:
        """The :class:`lmc.data.tasks.Task` named by ``task`` (``get_task(self.task)``)."""
        return get_task(self.task)

    def split(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(x, y)`` of the split ``"train"`` or ``"test"``."""
        if name == "train":
            return self.x_train, self.y_train
        if name == "test":
            return self.x_test, self.y_test
        raise LmcError(f"unknown split {name!r}: use 'train' or 'test'")

    def to(self, device: str | torch.device) -> Dataset:
        """Return a copy whose four tensors live on ``device`` (``"auto"`` allowed); self is
        left unchanged. Moving to the device the tensors are already on copies nothing."""
        dev = resolve_device(device)
        return dataclasses.replace(
            self,
            x_train=self.x_train.to(dev),
            y_train=self.y_train.to(dev),
            x_test=self.x_test.to(dev),
            y_test=self.y_test.to(dev),
        )

    @property
    def input_size(self) -> int:
        """Number of input features per example: ``prod(input_shape)``."""
        return math.prod(self.input_shape)

    @property
    def device(self) -> torch.device:
        """The device the tensors live on."""
        return self.x_train.device

    def __repr__(self) -> str:
        task = "" if self.task == "classification" else f", task={self.task!r}"
        return (
            f"Dataset(name={self.name!r}, train={len(self.y_train)}, test={len(self.y_test)}, "
            f"num_classes={self.num_classes}, input_shape={self.input_shape}, "
            f"augment={self.augment}{task}, device={self.device})"
        )


def channel_stats(x: np.ndarray, scale: float = 1.0) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and population standard deviation of ``x / scale``; x is ``(N, C, ...)``.

    Accumulated in float64 without copying the whole array: ``uint8`` data goes through an
    exact 256-bin histogram per channel, other dtypes one channel at a time. A channel with
    no spread gets ``std = 1`` so that dividing by it is safe.
    """
    if x.ndim < 2:
        raise ValueError("expected x of shape (N, C, ...)")
    means, stds = [], []
    for c in range(x.shape[1]):
        xc = x[:, c]
        if x.dtype == np.uint8:
            flat = np.ascontiguousarray(xc).reshape(-1)
            if not flat.flags.writeable:  # torch.from_numpy wants a writable array
                flat = flat.copy()
            counts = torch.bincount(torch.from_numpy(flat), minlength=256).numpy()
            counts = counts.astype(np.float64)
            values = np.arange(256, dtype=np.float64)
            total = counts.sum()
            mean = float((counts * values).sum() / total)
            var = float((counts * np.square(values - mean)).sum() / total)
        else:
            xc64 = xc.astype(np.float64)
            mean = float(xc64.mean())
            var = float(np.square(xc64 - mean).mean())
        std = math.sqrt(var)
        means.append(mean / scale)
        stds.append(std / scale if std > 1e-12 * max(1.0, abs(mean)) else 1.0)
    return tuple(means), tuple(stds)


def normalise(
    x: np.ndarray, mean: tuple[float, ...], std: tuple[float, ...], scale: float = 1.0
) -> torch.Tensor:
    """``(x / scale - mean[c]) / std[c]`` per channel (axis 1) as a float32 CPU tensor.

    Computed as ``(x - scale*mean) * (1 / (scale*std))`` in float32, one pass, no float64 copy.
    """
    shape = (1, -1) + (1,) * (x.ndim - 2)
    shift = torch.tensor([scale * m for m in mean], dtype=torch.float64)
    factor = torch.tensor([1.0 / (scale * s) for s in std], dtype=torch.float64)
    # Always a fresh, writable float32 copy: the caller's array is never modified.
    out = torch.from_numpy(np.array(x, dtype=np.float32, order="C", copy=True))
    out.sub_(shift.to(torch.float32).reshape(shape)).mul_(factor.to(torch.float32).reshape(shape))
    return out


def build_dataset(
    name: str,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    *,
    num_classes: int,
    augment: bool,
    scale: float = 1.0,
    device: str | torch.device = "cpu",
) -> Dataset:
    """Normalise raw arrays of shape ``(N, *input_shape)`` into a :class:`Dataset`.

    ``scale`` maps raw values to the documented units (255 for bytes, 16 for digits), so the
    recorded ``mean``/``std`` are per channel of ``x / scale`` from the training split only.
    """
    mean, std = channel_stats(x_train, scale)
    xtr = normalise(x_train, mean, std, scale)
    xte = normalise(x_test, mean, std, scale)
    ytr = torch.from_numpy(np.ascontiguousarray(y_train).astype(np.int64))
    yte = torch.from_numpy(np.ascontiguousarray(y_test).astype(np.int64))
    ds = Dataset(
        name=name,
        x_train=xtr,
        y_train=ytr,
        x_test=xte,
        y_test=yte,
        num_classes=int(num_classes),
        input_shape=tuple(int(d) for d in x_train.shape[1:]),
        mean=mean,
        std=std,
        augment=bool(augment),
    )
    dev = torch.device(device)
    return ds if dev.type == "cpu" else ds.to(dev)
