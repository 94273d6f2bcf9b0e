"""Atomic file writes and safe tensor files: a reader never sees half a file.

Temporary names. Everything lmc writes beside its place before renaming it in is named
``.<name>.lmc-<host>-<pid>.<random>.tmp`` (a file or folder being written) or
``.<name>.lmc-<host>-<pid>.old`` (an earlier output set aside while the new one is renamed
in), where ``<host>`` is 8 hex digits of a hash of this machine's host name and ``<pid>`` the
writing process (:func:`owner_tag`). A ``kill -9`` can leave such an entry behind; it is
provably stale when its host is this machine and no process with its pid is alive, and
:func:`remove_stale` removes exactly those. An entry of a live process, of another machine
(a shared file system) or of an older lmc (no tag) is never touched.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load, load_file, save

from lmc.config import LmcError, check_regular_file, read_regular_bytes


def owner_tag() -> str:
    """``lmc-<host>-<pid>``: who writes a temporary entry (see the module docstring)."""
    host = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
    return f"lmc-{host}-{os.getpid()}"


_OWNED = re.compile(
    r"\.(?:(?P<name>.*)\.)?lmc-(?P<host>[0-9a-f]{8})-(?P<pid>[0-9]+)\.(?:[A-Za-z0-9_]+\.tmp|old)"
)


def _pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists here (one of another user's counts; so does a zombie)."""
    if pid <= 0 or os.name == "nt":  # on Windows signal 0 is CTRL_C_EVENT: never probe
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def is_stale(name: str) -> bool:
    """Whether ``name`` is a temporary entry (``….lmc-<host>-<pid>.<random>.tmp`` or
    ``….lmc-<host>-<pid>.old``) written on this machine by a process that is no longer alive."""
    match = _OWNED.fullmatch(name)
    if match is None:
        return False
    host, pid = match.group("host"), int(match.group("pid"))
    return owner_tag().split("-")[1] == host and not _pid_alive(pid)


def remove_stale(folder: str | os.PathLike, prefix: str = ".") -> list[Path]:
    """Tidy what a killed lmc process left directly in ``folder``: the stale temporary entries
    (:func:`is_stale`) whose names start with ``prefix``. Returns the entries tidied.

    A stale ``.<name>.<tag>.old`` whose ``<name>`` is missing (the writer was killed between
    setting the earlier output aside and renaming the new one in) is put back as ``<name>``;
    every other stale entry is removed (a half-written one is never renamed in). Only entries
    provably stale are touched: one whose writer is alive (a concurrent worker), was on another
    machine, or carries no tag is left alone. Errors (a read-only store, an entry removed
    meanwhile by another process tidying the same folder) are ignored."""
    folder = Path(folder)
    tidied = []
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return tidied
    for entry in entries:
        if not entry.name.startswith(prefix) or not is_stale(entry.name):
            continue
        path = Path(entry.path)
        name = _OWNED.fullmatch(entry.name).group("name")  # type: ignore[union-attr]
        try:
            if entry.name.endswith(".old") and name and not os.path.lexists(folder / name):
                os.replace(path, folder / name)  # the earlier output, put back
            elif entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError:
            continue
        tidied.append(path)
    return tidied


def _temp_prefix(path: Path) -> str:
    return f".{path.name}.{owner_tag()}."


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it over ``path``.

    On any error the temporary file is removed and ``path`` is left as it was; an ``OSError``
    (a full disk, a read-only file system) becomes an ``LmcError`` naming ``path``.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise LmcError(f"cannot write {path}: {exc.strerror or exc}") from exc
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual permissions
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):  # a full disk, a read-only file system: name the file
            raise LmcError(f"cannot write {path}: {exc.strerror or exc}") from exc
        raise


def check_output_place(
    path: str | os.PathLike, what: str = "output folder", *, replaces: tuple[str, ...] | None = None
) -> Path:
    """Refuse at once an output folder that cannot be written; returns ``path`` as a Path.

    Checked before any work is done (so a long evaluation does not end in a traceback): a
    ``path`` that is a file or a dangling symbolic link, an ancestor that is a file, a nearest
    existing ancestor that cannot be written (a read-only file system, no permission) or whose
    file system has no free space. With ``replaces`` (the folder is to be replaced whole, see
    :func:`output_dir`), an existing folder must be empty or hold one of those files. Each is
    an ``LmcError`` naming the path. Passing does not
    promise the write succeeds (the disk may fill meanwhile): :func:`output_dir` and
    :func:`made_folder` clean up when it does not.
    """
    path = Path(path)
    if path.is_symlink() and not path.exists():
        raise LmcError(f"the {what} {path} is a dangling symbolic link; give a folder")
    if path.exists() and not path.is_dir():
        raise LmcError(f"the {what} {path} is a file, not a folder; give a folder")
    if replaces is not None and path.is_dir() and any(path.iterdir()):
        if not any((path / name).exists() for name in replaces):
            marks = " or ".join(replaces) or "lmc's files"
            raise LmcError(
                f"the {what} {path} holds other files (no {marks}, so no earlier lmc output) "
                f"and lmc replaces its output folder whole: give a new or empty folder (e.g. "
                f"{path / 'lmc-out'}), or the folder an earlier run of this command wrote "
                "(its outputs are replaced); nothing was written"
            )
    existing = _nearest_existing(path)
    if not existing.is_dir():
        raise LmcError(f"the {what} {path} cannot be made: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        reason = errno.EROFS if _read_only(existing) else errno.EACCES
        raise LmcError(f"cannot write the {what} {path}: {existing}: {os.strerror(reason)}")
    try:
        fs = os.statvfs(existing)
    except OSError:
        return path
    if fs.f_bavail == 0 or fs.f_favail == 0:
        raise LmcError(f"cannot write the {what} {path}: {existing}: {os.strerror(errno.ENOSPC)}")
    return path


def _nearest_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (as a file, folder or link)."""
    path = path.absolute()
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


@contextmanager
def made_folder(path: str | os.PathLike, *, keep: Callable[[Path], bool] | None = None):
    """Create folder ``path`` (and missing parents) for the block; on an error, remove what
    this call created, so a failed command leaves nothing behind.

    ``keep(path)``, when given, is asked on an error first: work worth resuming (a whole
    checkpoint, finished jobs) makes it return True, and the folder stays. Folders that
    existed before are never removed. Yields ``path`` as a Path.
    """
    path = Path(path)
    check_output_place(path)
    top = _nearest_existing(path)
    created = None if path.absolute() == top else _first_below(top, path.absolute())
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise LmcError(f"cannot make the folder {path}: {exc.strerror or exc}") from exc
    try:
        yield path
    except BaseException:
        if created is not None and not (keep is not None and keep(path)):
            shutil.rmtree(created, ignore_errors=True)
        raise


def _first_below(top: Path, path: Path) -> Path:
    """The child of ``top`` on the way down to ``path``."""
    return top / path.relative_to(top).parts[0]


@contextmanager
def output_dir(path: str | os.PathLike, *, replaces: tuple[str, ...] = ()) -> Iterator[Path]:
    """Yield a fresh temporary folder beside ``path``; on success it replaces ``path`` whole.

    Whatever was in ``path`` before (an earlier run's outputs) is replaced as one unit, so a
    reader never sees new files beside stale ones, and on any error nothing is left behind:
    ``path`` keeps its old contents. ``path`` must be new, empty, or hold one of the files
    named in ``replaces`` (the mark of an earlier output of the same kind): a folder of other
    files is never replaced. A ``path`` that exists and is not a folder, or a parent that
    cannot be written (read-only, full disk), is an ``LmcError`` naming the path.

    A ``path`` that is a symbolic link to a folder is written through: the link's target is
    replaced (its temporary folder made beside the target), and the link stays as it was,
    so the outputs land where the link points. Stale temporary folders of ``path`` left by a
    killed writer (:func:`remove_stale`) are removed first.
    """
    path = check_output_place(path, replaces=replaces)
    if path.is_symlink():  # a link to a folder (a dangling one was refused): its target
        path = Path(os.path.realpath(path))
    if path.parent.is_dir():
        remove_stale(path.parent, prefix=f".{path.name}.")
    with made_folder(path.parent):  # parents made here go again on an error
        try:
            tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(path), suffix=".tmp", dir=path.parent))
        except OSError as exc:
            raise LmcError(f"cannot write the output folder {path}: {exc.strerror or exc}") from exc
        old = None
        try:
            yield tmp
            os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; give the usual permissions
            if path.exists():
                old = path.parent / f".{path.name}.{owner_tag()}.old"
                os.replace(path, old)
            os.replace(tmp, path)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if old is not None and not path.exists():
                os.replace(old, path)  # put the earlier outputs back
            if isinstance(exc, OSError):
                raise LmcError(
                    f"cannot write the output folder {path}: {exc.strerror or exc}"
                ) from exc
            raise


@contextmanager
def output_files(folder: str | os.PathLike, names: Sequence[str] | None) -> Iterator[Path]:
    """Write several outputs that live beside other files in ``folder`` as one unit.

    Yields a temporary folder inside ``folder`` (made, with missing parents, when needed);
    the caller writes each of ``names`` (files or folders; ``None``: whatever it writes) into
    it. On success each is moved over its place in ``folder`` (a folder replaced whole); on
    any error the temporary folder goes, folders made here go, and ``folder`` keeps what it
    held. Files in ``folder`` not named are never touched (a report written beside the
    results it reads), except stale temporary entries a killed writer left
    (:func:`remove_stale`), removed first.
    """
    folder = check_output_place(folder)
    for name in names or ():
        target = folder / name
        if target.is_symlink() and not target.exists():
            raise LmcError(f"{target} is a dangling symbolic link; remove it or choose another")
    with made_folder(folder):
        remove_stale(folder)  # what a killed earlier write left here
        try:
            stage = Path(tempfile.mkdtemp(prefix=f".{owner_tag()}.", suffix=".tmp", dir=folder))
        except OSError as exc:
            raise LmcError(f"cannot write into {folder}: {exc.strerror or exc}") from exc
        try:
            yield stage
            for name in sorted(p.name for p in stage.iterdir()) if names is None else names:
                _move_into_place(stage / name, folder / name)
        except BaseException as exc:
            if isinstance(exc, OSError):
                raise LmcError(f"cannot write into {folder}: {exc.strerror or exc}") from exc
            raise
        finally:
            shutil.rmtree(stage, ignore_errors=True)


def _move_into_place(source: Path, target: Path) -> None:
    if not source.exists():
        raise LmcError(f"{source.name} was not written")  # a bug in the caller, said plainly
    if source.is_dir() and target.is_dir() and not target.is_symlink():
        old = target.parent / f".{target.name}.{owner_tag()}.old"
        os.replace(target, old)
        os.replace(source, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(source, target)


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


def tensors_digest(tensors: Mapping[str, torch.Tensor], header: str = "") -> str:
    """SHA-256 (hex) over ``header`` (UTF-8), then each tensor's name, dtype, shape and bytes
    in name order (on CPU, contiguous): the same tensors give the same digest on any device."""
    h = hashlib.sha256(header.encode())
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous()
        h.update(f"\0{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        if t.numel():
            h.update(memoryview(t.reshape(-1).view(torch.uint8).numpy()))
    return h.hexdigest()


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
