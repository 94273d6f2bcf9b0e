"""Readers for the official *binary* CIFAR-10/100 files (no pickle anywhere).

CIFAR-10 (``cifar-10-binary.tar.gz`` -> ``cifar-10-batches-bin/``): ``data_batch_1.bin`` ..
``data_batch_5.bin`` and ``test_batch.bin``; each record is 1 label byte then 3072 pixel bytes.
CIFAR-100 (``cifar-100-binary.tar.gz`` -> ``cifar-100-binary/``): ``train.bin`` and ``test.bin``;
each record is 1 coarse label byte, 1 fine label byte, then 3072 pixel bytes. We use the fine
labels (100 classes).

The 3072 pixel bytes are the red plane, then green, then blue, each 32x32 row-major, so a
record reshapes directly to ``(3, 32, 32)`` (CHW).
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np

from lmc.config import LmcError, open_regular, read_regular_bytes

PIXELS = 3 * 32 * 32


@dataclass(frozen=True)
class CifarLayout:
    """Where one CIFAR variant keeps its data and how its records look."""

    folder: str  # the folder the archive unpacks to
    archive: str  # the official archive's file name
    train_files: tuple[str, ...]
    test_files: tuple[str, ...]
    label_bytes: int  # label bytes in front of each record
    label_index: int  # which of them is the label we use
    num_classes: int

    @property
    def record_size(self) -> int:
        return self.label_bytes + PIXELS

    @property
    def files(self) -> tuple[str, ...]:
        return self.train_files + self.test_files


LAYOUTS: dict[str, CifarLayout] = {
    "cifar10": CifarLayout(
        folder="cifar-10-batches-bin",
        archive="cifar-10-binary.tar.gz",
        train_files=tuple(f"data_batch_{i}.bin" for i in range(1, 6)),
        test_files=("test_batch.bin",),
        label_bytes=1,
        label_index=0,
        num_classes=10,
    ),
    "cifar100": CifarLayout(
        folder="cifar-100-binary",
        archive="cifar-100-binary.tar.gz",
        train_files=("train.bin",),
        test_files=("test.bin",),
        label_bytes=2,
        label_index=1,
        num_classes=100,
    ),
}


def parse_records(
    data: bytes, layout: CifarLayout, source: str | os.PathLike = "<bytes>"
) -> tuple[np.ndarray, np.ndarray]:
    """Split CIFAR binary records into images ``uint8 (N, 3, 32, 32)`` and labels ``uint8 (N,)``."""
    size = layout.record_size
    if len(data) == 0 or len(data) % size != 0:
        raise LmcError(
            f"{source} is not a valid CIFAR binary file ({len(data)} bytes is not a positive "
            f"multiple of the {size}-byte record); delete it and fetch it again (--download)"
        )
    records = np.frombuffer(data, dtype=np.uint8).reshape(-1, size)
    labels = records[:, layout.label_index].copy()
    if labels.max() >= layout.num_classes:
        raise LmcError(
            f"{source} has label {int(labels.max())}, but this dataset has "
            f"{layout.num_classes} classes; is it the right file? delete it and fetch it again"
        )
    images = records[:, layout.label_bytes :].reshape(-1, 3, 32, 32)
    return images, labels


def has_files(folder: Path, layout: CifarLayout) -> bool:
    """Whether ``folder`` holds every binary file of ``layout``."""
    return all((folder / f).is_file() for f in layout.files)


def _read_folder(folder: Path, layout: CifarLayout) -> dict[str, bytes]:
    out = {}
    for f in layout.files:
        try:
            out[f] = read_regular_bytes(folder / f, "CIFAR file")
        except OSError as exc:
            raise LmcError(f"cannot read {folder / f}: {exc.strerror or exc}") from exc
    return out


def _read_archive(archive: Path, layout: CifarLayout) -> dict[str, bytes]:
    """Read the binary files straight out of the .tar.gz (nothing is written to disk)."""
    out: dict[str, bytes] = {}
    try:
        with (
            open_regular(archive, "CIFAR archive") as handle,
            tarfile.open(fileobj=handle, mode="r:*") as tar,
        ):
            for member in tar:
                name = PurePosixPath(member.name).name
                if member.isfile() and name in layout.files and name not in out:
                    handle = tar.extractfile(member)
                    if handle is not None:
                        out[name] = handle.read()
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise LmcError(
            f"{archive} is not a readable CIFAR archive ({exc}); delete it and fetch it again "
            "(--download)"
        ) from exc
    missing = [f for f in layout.files if f not in out]
    if missing:
        raise LmcError(
            f"{archive} lacks {', '.join(missing)}; is it {layout.archive}? delete it and "
            "fetch it again (--download)"
        )
    return out


def read_cifar(
    location: str | os.PathLike, layout: CifarLayout
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Read ``(x_train, y_train, x_test, y_test)`` from an extracted folder or the .tar.gz.

    Images are ``uint8 (N, 3, 32, 32)``, labels ``uint8 (N,)``; training batches are
    concatenated in file order.
    """
    location = Path(location)
    if location.is_dir():
        blobs = _read_folder(location, layout)
    else:
        blobs = _read_archive(location, layout)

    def gather(files: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        parts = [parse_records(blobs[f], layout, location / f) for f in files]
        if len(parts) == 1:
            return parts[0]
        return (
            np.concatenate([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]),
        )

    x_train, y_train = gather(layout.train_files)
    x_test, y_test = gather(layout.test_files)
    return x_train, y_train, x_test, y_test


def _safe_member_path(name: str, archive: Path) -> PurePosixPath:
    path = PurePosixPath(name)
    drive = len(name) >= 2 and name[1] == ":" and name[0].isalpha()
    if path.is_absolute() or ".." in path.parts or name.startswith(("/", "\\")) or drive:
        raise LmcError(
            f"{archive} holds the unsafe path {name!r}; refusing to extract it, delete the archive"
        )
    return path


def extract_archive(archive: str | os.PathLike, dest: str | os.PathLike) -> list[Path]:
    """Safely unpack a tar archive into ``dest``; return the top-level entries created.

    Only regular files and folders are unpacked, with our own writes (no links, devices,
    permissions or owners from the archive). A member whose path is absolute or climbs out
    with ``..`` makes the whole extraction fail before anything is placed. Files are first
    unpacked into a temporary folder inside ``dest`` and moved into place only when all went
    well; an existing top-level entry is never overwritten.
    """
    archive, dest = Path(archive), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".extract-", dir=dest))
    try:
        try:
            with (
                open_regular(archive, "CIFAR archive") as handle,
                tarfile.open(fileobj=handle, mode="r:*") as tar,
            ):
                for member in tar:
                    rel = _safe_member_path(member.name, archive)
                    if not rel.parts or rel.parts == (".",):
                        continue
                    target = tmp.joinpath(*rel.parts)
                    if tmp.resolve() not in target.resolve().parents:
                        raise LmcError(f"{archive} holds the unsafe path {member.name!r}")
                    if member.isdir():
                        target.mkdir(parents=True, exist_ok=True)
                    elif member.isfile():
                        target.parent.mkdir(parents=True, exist_ok=True)
                        handle = tar.extractfile(member)
                        assert handle is not None
                        with open(target, "wb") as out:
                            shutil.copyfileobj(handle, out, 1 << 20)
                    # Links, devices and fifos are skipped: the datasets need none.
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            raise LmcError(
                f"could not unpack {archive} ({exc}); delete it and fetch it again"
            ) from exc
        created = []
        for entry in sorted(tmp.iterdir()):
            final = dest / entry.name
            if final.exists():
                raise LmcError(
                    f"{final} already exists but is incomplete or unreadable; remove it and retry"
                )
            os.replace(entry, final)
            created.append(final)
        return created
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
