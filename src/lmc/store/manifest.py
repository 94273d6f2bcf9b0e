"""A run's manifest: the size and SHA-256 of each file it wrote, to check them on load.

``manifest.json`` is written last, atomically, after every other file of a finished run
(``config.json``, ``model.safetensors``, any extra tensor file, ``metrics.json``)::

    {"format": 1, "algorithm": "sha256",
     "files": {"model.safetensors": {"size": 11653792, "sha256": "…"}, …}}

What is checked when
- every load (:func:`check_sizes`): each listed file exists, is a regular file and has its
  recorded size: a ``stat`` per file, nothing read;
- reuse and resume (``RunStore.find``, ``Run.state_dict``): the SHA-256 too. The bytes are
  hashed as they are read for loading (one read). A file whose ``stat`` (size, mtime, ctime,
  inode, device) is the one it had when it was last hashed, at least :data:`RACY_SECONDS`
  after its last change, is not hashed again: any write through the file system changes its
  ctime, which cannot be set back, so only media faults escape this (git's stat cache works
  the same way). Those stats live in ``.verified.json``, a cache that may be deleted;
- ``lmc verify`` (:func:`verify_files` with ``use_cache=False``): every byte, always.

A file the manifest does not list (a ``summary.json`` beside an aligned model) is not checked.
A finished run without a manifest was written before lmc kept one: it is *unverified* (usable,
with one warning), never damaged.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from lmc.config import LmcError, check_regular_file, open_regular, read_regular_text

from .atomic import read_json, write_json

#: The manifest of a finished run (size and SHA-256 of each file), written last.
MANIFEST_FILE = "manifest.json"
CACHE_FILE = ".verified.json"
FORMAT = 1
RACY_SECONDS = 2.0  # a file changed less than this before its stat was cached is rehashed
CACHED_BYTES = 1 << 20  # smaller files are hashed every time: cheaper than the cache's write
_CHUNK = 1 << 22


class DamagedRunError(LmcError):
    """A file of a run does not match its manifest (or its folder's name). ``file`` is the
    path of the file at fault; the message is one line naming it."""

    def __init__(self, file: str | os.PathLike, reason: str) -> None:
        self.file = Path(file)
        self.reason = reason
        super().__init__(f"{self.file} is damaged: {reason}")


def write_manifest(run_dir: str | os.PathLike, records: dict[str, dict[str, Any]]) -> None:
    """Write ``manifest.json`` (atomically) listing ``records``: file name -> size, SHA-256."""
    write_json(
        Path(run_dir) / MANIFEST_FILE,
        {"format": FORMAT, "algorithm": "sha256", "files": dict(sorted(records.items()))},
    )


def read_manifest(run_dir: str | os.PathLike) -> dict[str, dict[str, Any]] | None:
    """The manifest's ``files`` (name -> {size, sha256}), or ``None`` if the run has none.
    An unreadable or malformed manifest is a :class:`DamagedRunError`."""
    path = Path(run_dir) / MANIFEST_FILE
    if not os.path.lexists(path):
        return None
    try:
        raw = read_json(path)
    except LmcError as exc:
        raise DamagedRunError(path, str(exc).removeprefix(f"{path} ")) from exc
    files = raw.get("files") if isinstance(raw, dict) else None
    if not isinstance(files, dict) or raw.get("algorithm") != "sha256":
        raise DamagedRunError(path, "not an lmc manifest (no 'files' with SHA-256 records)")
    for name, rec in files.items():
        ok = isinstance(rec, dict) and isinstance(rec.get("size"), int)
        ok = ok and isinstance(rec.get("sha256"), str) and len(rec["sha256"]) == 64
        if not ok or "/" in name or name in ("", ".", ".."):
            raise DamagedRunError(path, f"malformed record for {name!r}")
    return files


def check_size(path: Path, record: dict[str, Any], st: os.stat_result | None = None) -> None:
    """``path`` is a regular file of the recorded size (a ``stat``, nothing read)."""
    if st is None:
        st = _stat_listed(path)
    _check_length(path, st.st_size, record)


def _check_length(path: Path, size: int, record: dict[str, Any]) -> None:
    if size != record["size"]:
        raise DamagedRunError(
            path, f"{size} bytes where {record['size']} were written (cut short or grown)"
        )


def _check_digest(path: Path, digest: str, record: dict[str, Any]) -> None:
    if digest != record["sha256"]:
        raise DamagedRunError(
            path, f"its SHA-256 is {digest[:12]}…, not the {record['sha256'][:12]}… written"
        )


def check_sizes(run_dir: str | os.PathLike, manifest: dict[str, dict[str, Any]]) -> None:
    """Every file the manifest lists exists, is regular and has its size."""
    for name, record in manifest.items():
        check_size(Path(run_dir) / name, record)


def check_data(path: Path, data: bytes, record: dict[str, Any]) -> None:
    """Size and SHA-256 of bytes read from ``path`` against the manifest's record."""
    _check_length(path, len(data), record)
    _check_digest(path, hashlib.sha256(data).hexdigest(), record)


def read_checked(
    run_dir: Path, name: str, manifest: dict | None, what: str, *, vouched_ok: bool = False
) -> bytes | None:
    """The bytes of ``run_dir/name``, read once; with a manifest, their size and SHA-256 are
    checked against it. With ``vouched_ok``, a file the stat cache vouches for is not read:
    ``None`` is returned and the caller loads it from its path (saving a copy of its bytes)."""
    path = run_dir / name
    record = (manifest or {}).get(name)
    if record is not None:
        st = _stat_listed(path)
        check_size(path, record, st)
        if st.st_size >= CACHED_BYTES:
            cache = _read_cache(run_dir)
            if _vouched(cache, name, record, st):
                if vouched_ok:
                    return None
                record = None  # read, but not hashed again
    try:
        handle = open_regular(path, what)
    except LmcError as exc:
        if record is not None:
            raise DamagedRunError(path, str(exc)) from exc
        raise
    with handle:
        st = os.fstat(handle.fileno())
        if record is not None:
            check_size(path, record, st)
        try:
            data = handle.read()
        except OSError as exc:
            raise LmcError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    if record is not None:
        check_data(path, data, record)
        if len(data) >= CACHED_BYTES:
            _remember(run_dir, _read_cache(run_dir), {name: (record, st)})
    return data


def _stat_listed(path: Path) -> os.stat_result:
    """The stat of a file the manifest lists; missing or not regular is damage."""
    try:
        return check_regular_file(path, "run file")
    except LmcError as exc:
        if not os.path.lexists(path):
            raise DamagedRunError(path, "missing (the manifest lists it)") from exc
        raise DamagedRunError(path, str(exc)) from exc


def verify_files(
    run_dir: str | os.PathLike,
    manifest: dict[str, dict[str, Any]],
    *,
    use_cache: bool = True,
    skip: Collection[str] = (),
) -> list[DamagedRunError]:
    """Hash every file the manifest lists but those in ``skip`` (streamed; ``use_cache``: not
    those the stat cache vouches for, and remember the ones found whole). Returns the
    problems, one per file."""
    run_dir = Path(run_dir)
    cache = _read_cache(run_dir) if use_cache else {}
    problems: list[DamagedRunError] = []
    fresh: dict[str, tuple[dict, os.stat_result]] = {}
    for name, record in manifest.items():
        if name in skip:
            continue
        path = run_dir / name
        try:
            st = _stat_listed(path)
            check_size(path, record, st)
            cacheable = use_cache and record["size"] >= CACHED_BYTES
            if cacheable and _vouched(cache, name, record, st):
                continue
            with open_regular(path, "run file") as handle:
                st = os.fstat(handle.fileno())
                check_size(path, record, st)
                digest = hashlib.sha256()
                while chunk := handle.read(_CHUNK):
                    digest.update(chunk)
            _check_digest(path, digest.hexdigest(), record)
            if cacheable:
                fresh[name] = (record, st)
        except DamagedRunError as exc:
            problems.append(exc)
        except LmcError as exc:
            problems.append(DamagedRunError(path, str(exc)))
        except OSError as exc:
            problems.append(DamagedRunError(path, getattr(exc, "strerror", None) or str(exc)))
    if use_cache and fresh:
        _remember(run_dir, cache, fresh)
    return problems


def _stat_key(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def _read_cache(run_dir: Path) -> dict[str, Any]:
    path = run_dir / CACHE_FILE
    if not os.path.lexists(path):
        return {}
    try:
        raw = json.loads(read_regular_text(path, "stat cache"))
    except ValueError:  # LmcError included: a damaged cache is only a cache
        return {}
    return raw if isinstance(raw, dict) else {}


def _vouched(cache: dict[str, Any], name: str, record: dict[str, Any], st: os.stat_result) -> bool:
    entry = cache.get(name)
    if not isinstance(entry, dict) or entry.get("sha256") != record["sha256"]:
        return False
    if entry.get("stat") != _stat_key(st):
        return False
    # racily clean: a change within the timestamp granularity of the stat would not show
    checked = entry.get("checked_ns")
    return isinstance(checked, int) and st.st_ctime_ns < checked - int(RACY_SECONDS * 1e9)


def _remember(
    run_dir: Path, cache: dict[str, Any], fresh: dict[str, tuple[dict, os.stat_result]]
) -> None:
    now = time.time_ns()
    entries = {k: v for k, v in cache.items() if isinstance(v, dict)}
    for name, (record, st) in fresh.items():
        entries[name] = {"sha256": record["sha256"], "stat": _stat_key(st), "checked_ns": now}
    try:
        write_json(run_dir / CACHE_FILE, entries)
    except (OSError, LmcError):
        pass  # a read-only store: the files are simply hashed again next time
