"""Device selection."""

from __future__ import annotations

import torch

from .errors import LmcError


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """Turn ``"auto"``/``None``/a name into a ``torch.device``, checking it exists.

    ``auto`` picks CUDA when available, then MPS, then CPU.
    """
    if device is None or str(device) == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise LmcError(f"unknown device {device!r}: use cpu, cuda, cuda:N, mps or auto") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise LmcError(
            f"device {device!r} asked for, but PyTorch sees no CUDA GPU; use --device cpu"
        )
    return dev
