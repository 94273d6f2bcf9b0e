"""Atomic file writes and safe tensor files: a reader never sees half a file."""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load, load_file, save

from lmc.config import LmcError, check_regular_file, read_regular_bytes


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


@contextmanager
def output_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a fresh temporary folder beside ``path``; on success it replaces ``path`` whole.

    Whatever was in ``path`` before (an earlier run's outputs) is replaced as one unit, so a
    reader never sees new files beside stale ones, and on any error nothing is left behind:
    ``path`` keeps its old contents. A ``path`` that exists and is not a folder, or a parent
    that cannot be written (read-only, full disk), is an ``LmcError`` naming the path.
    """
    path = Path(path)
    if path.is_symlink() and not path.exists():
        raise LmcError(f"{path} is a dangling symbolic link; give a folder for the output")
    if path.exists() and not path.is_dir():
        raise LmcError(f"{path} is a file, not a folder; give a folder for the output")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    except OSError as exc:
        raise LmcError(f"cannot write the output folder {path}: {exc.strerror or exc}") from exc
    old = None
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; give the usual permissions
        if path.exists():
            old = path.parent / f".{path.name}.{os.getpid()}.old"
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not path.exists():
            os.replace(old, path)  # put the earlier outputs back
        if isinstance(exc, OSError):
            raise LmcError(f"cannot write the output folder {path}: {exc.strerror or exc}") from exc
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def jsonable(obj: Any) -> Any:
    """``obj`` with tensors, numpy values and paths converted to JSON values, and non-finite
    floats to ``None`` (JSON has no NaN)."""
    import numpy as np

    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        return jsonable(obj.tolist())
    if isinstance(obj, (np.floating, np.integer, np.bool_)):
        return jsonable(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if hasattr(obj, "__fspath__"):
        return str(obj)
    return obj


def write_json(path: str | os.PathLike, obj: Any) -> dict[str, Any]:
    """Write ``obj`` as indented JSON, atomically. Returns the file's ``{"size", "sha256"}``."""
    return write_bytes(
        path, (json.dumps(obj, indent=2, sort_keys=True, allow_nan=True) + "\n").encode()
    )


def write_text(path: str | os.PathLike, text: str) -> dict[str, Any]:
    """Write ``text`` (UTF-8), atomically. Returns the file's ``{"size", "sha256"}``."""
    return write_bytes(path, text.encode())


def write_bytes(path: str | os.PathLike, data: bytes) -> dict[str, Any]:
    """Write ``data``, atomically. Returns ``{"size", "sha256"}`` of the bytes written."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def read_json(path: str | os.PathLike, what: str = "JSON file") -> Any:
    """Read a JSON file; a missing, corrupt or non-regular file (a FIFO, a folder) is an
    ``LmcError`` naming it."""
    path = Path(path)
    if not os.path.lexists(path):
        raise LmcError(f"{path} does not exist")
    data = read_regular_bytes(path, what)
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise LmcError(f"{path} is not valid JSON ({exc}); delete it and re-run") from exc


def save_tensors(
    path: str | os.PathLike,
    tensors: dict[str, torch.Tensor],
    metadata: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Save tensors as safetensors (moved to CPU, made contiguous), atomically. Returns the
    file's ``{"size", "sha256"}``, hashed from the bytes written."""
    cpu = {k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}
    return write_bytes(path, save(cpu, metadata=metadata))


def load_tensors(
    path: str | os.PathLike, device: str | torch.device = "cpu"
) -> dict[str, torch.Tensor]:
    """Load a safetensors file (never unpickles); a corrupt or truncated file is an ``LmcError``."""
    path = Path(path)
    if not os.path.lexists(path):
        raise LmcError(f"{path} does not exist")
    check_regular_file(path, "tensor file")  # never hand a FIFO to safetensors
    return load_regular_tensors(path, device)


def load_regular_tensors(path: Path, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """:func:`load_tensors` for a path already checked to be a regular file."""
    try:
        return load_file(str(path), device=str(device))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise LmcError(
            f"{path} is corrupt or truncated ({exc}); delete the run folder and train again"
        ) from exc


def tensors_from_bytes(
    data: bytes, path: str | os.PathLike, device: str | torch.device = "cpu"
) -> dict[str, torch.Tensor]:
    """Parse the bytes of a safetensors file read from ``path`` (named in errors)."""
    try:
        tensors = load(data)
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise LmcError(
            f"{path} is corrupt or truncated ({exc}); delete the run folder and train again"
        ) from exc
    if torch.device(device).type != "cpu":
        tensors = {k: v.to(device) for k, v in tensors.items()}
    return tensors
