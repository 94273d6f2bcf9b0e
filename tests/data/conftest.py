"""Fixtures for lmc.data tests: isolated lookup folders and writers of tiny dataset files."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import lmc.data.paths as data_paths

IDX_TYPE = {np.dtype("u1"): 0x08, np.dtype("i1"): 0x09, np.dtype(">i2"): 0x0B,
            np.dtype(">i4"): 0x0C, np.dtype(">f4"): 0x0D, np.dtype(">f8"): 0x0E}  # fmt: skip


def idx_bytes(array: np.ndarray) -> bytes:
    """Hand-built IDX bytes: 0, 0, type, ndim, big-endian uint32 dims, big-endian data."""
    big = array.astype(array.dtype.newbyteorder(">")) if array.dtype.itemsize > 1 else array
    header = bytes([0, 0, IDX_TYPE[big.dtype], array.ndim])
    header += b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return header + big.tobytes()


def write_idx(path: Path, array: np.ndarray, gz: bool | None = None) -> Path:
    data = idx_bytes(array)
    if gz is None:
        gz = path.suffix == ".gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


def write_mnist_folder(folder: Path, *, n_train=20, n_test=7, seed=0, gz=True) -> dict:
    """Four tiny MNIST-format files in ``folder``; returns the raw arrays written."""
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, n_train, dtype=np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, n_test, dtype=np.uint8),
    }
    for stem, arr in arrays.items():
        write_idx(folder / (stem + (".gz" if gz else "")), arr, gz=gz)
    return arrays


def cifar_records(labels: np.ndarray, images: np.ndarray, coarse: np.ndarray | None = None):
    """Binary CIFAR records: [coarse byte,] label byte, 3072 pixel bytes (CHW order)."""
    n = len(labels)
    parts = [] if coarse is None else [coarse.reshape(n, 1)]
    parts += [labels.reshape(n, 1), images.reshape(n, 3072)]
    return np.concatenate(parts, axis=1).astype(np.uint8).tobytes()


def make_cifar10_files(seed=0, per_batch=2, n_test=3) -> dict:
    """{file name: bytes} of a tiny CIFAR-10 binary set, plus the arrays under '_arrays'."""
    rng = np.random.default_rng(seed)
    files, xs, ys = {}, [], []
    for i in range(1, 6):
        x = rng.integers(0, 256, (per_batch, 3, 32, 32), dtype=np.uint8)
        y = rng.integers(0, 10, per_batch, dtype=np.uint8)
        files[f"data_batch_{i}.bin"] = cifar_records(y, x)
        xs.append(x)
        ys.append(y)
    xt = rng.integers(0, 256, (n_test, 3, 32, 32), dtype=np.uint8)
    yt = rng.integers(0, 10, n_test, dtype=np.uint8)
    files["test_batch.bin"] = cifar_records(yt, xt)
    files["_arrays"] = (np.concatenate(xs), np.concatenate(ys), xt, yt)
    return files


def write_files(folder: Path, files: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        if not name.startswith("_"):
            (folder / name).write_bytes(data)
    return folder


def write_tar_gz(path: Path, members: dict[str, bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """Point every lookup root at empty temporary folders (cache, LMC_DATA, Debian location)."""
    ns = SimpleNamespace(
        root=tmp_path / "root",
        env=tmp_path / "env",
        xdg=tmp_path / "xdg",
        cache=tmp_path / "xdg" / "lmc",
        debian=tmp_path / "debian" / "fashion-mnist",
    )
    monkeypatch.setenv("XDG_CACHE_HOME", str(ns.xdg))
    monkeypatch.delenv("LMC_DATA", raising=False)
    monkeypatch.setattr(data_paths, "DEBIAN_FASHION_MNIST", ns.debian)
    return ns


@pytest.fixture
def helpers():
    return SimpleNamespace(
        idx_bytes=idx_bytes,
        write_idx=write_idx,
        write_mnist_folder=write_mnist_folder,
        cifar_records=cifar_records,
        make_cifar10_files=make_cifar10_files,
        write_files=write_files,
        write_tar_gz=write_tar_gz,
    )
