"""Atomic file writes and safe tensor files: a reader never sees half a file."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from lmc.config import LmcError


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it over ``path``.

    On any error the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, allow_nan=True) + "\n")


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def read_json(path: str | os.PathLike) -> Any:
    """Read a JSON file; a missing or corrupt file is an ``LmcError`` naming it."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise LmcError(f"{path} does not exist") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise LmcError(f"{path} is not valid JSON ({exc}); delete it and re-run") from exc


def save_tensors(
    path: str | os.PathLike,
    tensors: dict[str, torch.Tensor],
    metadata: dict[str, str] | None = None,
) -> None:
    """Save tensors as safetensors (moved to CPU, made contiguous), atomically."""
    cpu = {k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}
    with atomic_path(path) as tmp:
        save_file(cpu, str(tmp), metadata=metadata)


def load_tensors(
    path: str | os.PathLike, device: str | torch.device = "cpu"
) -> dict[str, torch.Tensor]:
    """Load a safetensors file (never unpickles); a corrupt or truncated file is an ``LmcError``."""
    path = Path(path)
    if not path.exists():
        raise LmcError(f"{path} does not exist")
    try:
        return load_file(str(path), device=str(device))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise LmcError(
            f"{path} is corrupt or truncated ({exc}); delete the run folder and train again"
        ) from exc
