"""TensorBoard logging of training and sweeps (optional: needs the ``tensorboard`` package).

:class:`TensorBoardLogger` writes event files into ``log_dir`` with
``torch.utils.tensorboard.SummaryWriter``. It is a per-epoch hook of :func:`lmc.train.fit`:
called as ``logger(epoch, model, optimizer, history)`` (fit's ``on_epoch_end``) it logs the
epoch's record ``history[-1]`` at step ``epoch`` (1-based, as in the record). Record keys
map to tags by :data:`EPOCH_TAGS` (``train_loss`` -> ``train/loss``, ``test_accuracy`` ->
``test/accuracy``, ``lr`` -> ``train/lr``, ...); any other ``<split>_<metric>`` key goes to
``<split>/<metric>``. Losses are mean cross-entropies in nats, accuracies fractions in
[0, 1], as fit records them. :func:`chain_hooks` runs several hooks in turn (checkpoint
saving, then logging), so one ``on_epoch_end`` does both.

``tensorboard`` is imported only when a logger is made; without it the logger raises a
one-line :class:`lmc.config.LmcError` that says how to install it. Callers that create files
before logging starts (``lmc train --log tensorboard``) call :func:`require_tensorboard` and
:func:`check_log_dir` first, so a missing package or a bad folder fails before anything is
written.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from torch import nn
from torch.optim import Optimizer

from lmc.config import LmcError
from lmc.config.validate import check_int

#: The hook signature of :func:`lmc.train.fit`'s ``on_epoch_end``.
EpochHook = Callable[[int, nn.Module, Optimizer, list], None]

#: fit's per-epoch record key -> TensorBoard tag. ``epoch`` is the step, not a scalar.
EPOCH_TAGS = {
    "train_loss": "train/loss",
    "train_accuracy": "train/accuracy",
    "test_loss": "test/loss",
    "test_accuracy": "test/accuracy",
    "lr": "train/lr",
    "seconds": "time/epoch_seconds",
    "decay_budget": "train/decay_budget",
}
INSTALL_HINT = "pip install 'lmc[tensorboard]'"


def _summary_writer_class() -> type:
    """``torch.utils.tensorboard.SummaryWriter``, imported on first use."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as error:
        raise LmcError(
            f"TensorBoard logging needs the tensorboard package, which is not installed: "
            f"{INSTALL_HINT}"
        ) from error
    return SummaryWriter


def require_tensorboard() -> None:
    """Raise the one-line :class:`lmc.config.LmcError` of a missing ``tensorboard`` package
    now, before any work (nothing is created)."""
    _summary_writer_class()


def check_log_dir(log_dir: str | os.PathLike) -> Path:
    """``log_dir`` as a :class:`~pathlib.Path`, checked (nothing is created): it and its
    nearest existing parent must be folders, else a one-line :class:`lmc.config.LmcError`
    naming the path (rather than an ``OSError`` from inside the writer, after training)."""
    if not isinstance(log_dir, (str, os.PathLike)) or not str(log_dir):
        raise LmcError(f"log_dir must be a folder path, got {log_dir!r}")
    path = Path(log_dir)
    for place in (path, *path.parents):
        if place.exists() or place.is_symlink():
            if not place.is_dir():
                raise LmcError(f"log_dir {str(path)!r}: {str(place)!r} is a file, not a folder")
            break
    return path


def epoch_tag(key: str) -> str | None:
    """The tag of a per-epoch record key (``None`` for ``epoch``, the step)."""
    if key == "epoch":
        return None
    if key in EPOCH_TAGS:
        return EPOCH_TAGS[key]
    split, sep, metric = key.partition("_")
    return f"{split}/{metric}" if sep and split and metric else key


def _scalar(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise LmcError(f"{name} must be a number, got {value!r}")
    return float(value)


class TensorBoardLogger:
    """Scalars for TensorBoard, written into ``log_dir`` (created if missing).

    Use it as fit's hook (``fit(..., on_epoch_end=TensorBoardLogger(dir))``), or call
    :meth:`log_epoch` with a record and :meth:`log_sweep_result` for a sweep's results. Close
    it (or use it as a context manager) to flush the event file.
    """

    def __init__(self, log_dir: str | os.PathLike) -> None:
        path = check_log_dir(log_dir)
        writer_class = _summary_writer_class()
        self.log_dir = path
        self._writer = writer_class(log_dir=str(path))

    def __call__(
        self, epoch: int, model: nn.Module, optimizer: Optimizer, history: list[dict]
    ) -> None:
        """fit's ``on_epoch_end``: log the last record of ``history`` at step ``epoch``."""
        if not history:
            raise LmcError("history must hold the epoch's record, got an empty list")
        self.log_epoch(history[-1], step=epoch)

    def log_epoch(self, record: Mapping[str, Any], step: int | None = None) -> None:
        """Log one per-epoch record (fit's history entry: ``train_loss``, ``train_accuracy``,
        ``test_loss``, ``test_accuracy``, ``lr``, ``seconds``) at ``step`` (default: its
        ``epoch``). Keys whose value is ``None`` are skipped."""
        if step is None:
            if "epoch" not in record:
                raise LmcError("record must hold 'epoch' when no step is given")
            step = record["epoch"]
        step = check_int("step", step, minimum=0)
        for key, value in record.items():
            tag = epoch_tag(key)
            if tag is None or value is None:
                continue
            self._writer.add_scalar(tag, _scalar(f"record[{key!r}]", value), step)

    def log_sweep_result(
        self, tag: str, step: int, values: Mapping[str, float | None] | float
    ) -> None:
        """Log a sweep's result at ``step`` (an integer ≥ 0: a width, a job's index, ...).

        ``values``: a number (logged under ``tag``) or a mapping ``{name: number}`` (each under
        ``tag/name``, e.g. ``log_sweep_result("loss_barrier", 64, {"weight": 0.02})``);
        ``None`` values (undefined results) are skipped."""
        if not isinstance(tag, str) or not tag.strip("/"):
            raise LmcError(f"tag must be a non-empty string, got {tag!r}")
        step = check_int("step", step, minimum=0)
        tag = tag.strip("/")
        if isinstance(values, Mapping):
            items = [(f"{tag}/{name}", values[name], f"values[{name!r}]") for name in values]
        else:
            items = [(tag, values, "values")]
        scalars = [(t, _scalar(label, v)) for t, v, label in items if v is not None]
        for name, value in scalars:
            self._writer.add_scalar(name, value, step)

    def flush(self) -> None:
        """Write what is pending to the event file."""
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()

    def __enter__(self) -> TensorBoardLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def chain_hooks(*hooks: EpochHook | None) -> EpochHook:
    """One ``on_epoch_end`` hook that calls each of ``hooks`` (``None`` entries skipped) in
    order with the same arguments, e.g. ``chain_hooks(save_checkpoint_hook, logger)``: the
    checkpoint is saved before the epoch is logged. An exception stops the chain."""
    for index, hook in enumerate(hooks):
        if hook is not None and not callable(hook):
            raise LmcError(f"hooks[{index}] must be callable, got {hook!r}")
    chained = [hook for hook in hooks if hook is not None]

    def run_all(epoch: int, model: nn.Module, optimizer: Optimizer, history: list) -> None:
        for hook in chained:
            hook(epoch, model, optimizer, history)

    return run_all
