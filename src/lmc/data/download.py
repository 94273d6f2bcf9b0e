"""Fetching the official dataset files, checked against their published checksums.

Every file is streamed into a temporary file next to its destination, its checksum (MD5 for the
image datasets, as their authors publish; SHA-256 for the text corpora) computed on the way, and
moved into place with ``os.replace`` only when the checksum matches; on any failure the
temporary file is removed, so no half-written or unverified file is ever left behind. Files come
into ``<cache>/<dataset>/`` (see :func:`lmc.data.paths.cache_dir`). CIFAR archives are then
unpacked there safely and the archive is deleted.

Text corpora (:data:`TEXT_RESOURCES`): ``tiny-shakespeare`` is the ``input.txt`` of Karpathy's
char-rnn repository (1,115,394 bytes), saved as ``<cache>/tiny-shakespeare/input.txt``.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from lmc.config import LmcError

from .cifar import LAYOUTS, extract_archive


@dataclass(frozen=True)
class Resource:
    """Where a dataset's official files live: ``base_url + file name``, with their checksums
    (hex digests of ``algorithm``, a :mod:`hashlib` name: ``"md5"`` or ``"sha256"``)."""

    base_url: str
    files: dict[str, str]  # file name -> hex digest
    algorithm: str = "md5"


# The published checksums (as listed by the dataset authors and torchvision).
RESOURCES: dict[str, Resource] = {
    "mnist": Resource(
        "https://ossci-datasets.s3.amazonaws.com/mnist/",
        {
            "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
            "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
            "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
            "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
        },
    ),
    "fashion-mnist": Resource(
        "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
        {
            "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
            "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
            "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
            "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
        },
    ),
    "cifar10": Resource(
        "https://www.cs.toronto.edu/~kriz/",
        {"cifar-10-binary.tar.gz": "c32a1d4ab5d03f1284b67883e8d87530"},
    ),
    "cifar100": Resource(
        "https://www.cs.toronto.edu/~kriz/",
        {"cifar-100-binary.tar.gz": "03b5dce01913d631647c71ecec9e9cb8"},
    ),
}

#: SHA-256 of char-rnn's data/tinyshakespeare/input.txt (1,115,394 bytes), as published with
#: the file by the projects that pin it (e.g. TensorFlow Datasets' tiny_shakespeare checksums).
TINY_SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
TINY_SHAKESPEARE_FILE = "input.txt"

#: Text corpora, checked by SHA-256 (kept apart from the MD5-checked image datasets).
TEXT_RESOURCES: dict[str, Resource] = {
    "tiny-shakespeare": Resource(
        "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/",
        {TINY_SHAKESPEARE_FILE: TINY_SHAKESPEARE_SHA256},
        "sha256",
    ),
}

_NAMES = {"md5": "MD5", "sha256": "SHA-256"}

TIMEOUT_S = 60.0
_CHUNK = 1 << 20


def _hasher(algorithm: str):
    if algorithm not in _NAMES:
        raise LmcError(f"unknown checksum {algorithm!r}; use {' or '.join(_NAMES)}")
    return hashlib.new(algorithm, usedforsecurity=False)


def file_digest(path: str | os.PathLike, algorithm: str = "md5") -> str:
    """Hex digest (``"md5"`` or ``"sha256"``) of a file, read in chunks."""
    digest = _hasher(algorithm)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(url: str, dest: str | os.PathLike, md5: str, *, algorithm: str = "md5") -> Path:
    """Download ``url`` to ``dest`` atomically, refusing it unless its checksum is ``md5``
    (the hex digest of ``algorithm``: MD5 by default, ``"sha256"`` for SHA-256).

    Any ``urllib`` URL works (``https://``, ``http://``, ``file://``). Raises :class:`LmcError`
    on a network failure or checksum mismatch; ``dest`` is then left as it was.
    """
    digest = _hasher(algorithm)  # an unknown algorithm fails before anything is created
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
                    for chunk in iter(lambda: response.read(_CHUNK), b""):
                        digest.update(chunk)
                        out.write(chunk)
            except (urllib.error.URLError, OSError, ValueError) as exc:
                reason = getattr(exc, "reason", None) or exc
                raise LmcError(
                    f"could not download {url} ({reason}); check the connection, or put the "
                    f"file in {dest.parent} by hand"
                ) from exc
            out.flush()
            os.fsync(out.fileno())
        got = digest.hexdigest()
        if got != md5.lower():
            raise LmcError(
                f"{url} downloaded with {_NAMES[algorithm]} {got}, expected {md5}; the file "
                "was discarded, retry later or fetch it by hand"
            )
        os.replace(tmp, dest)
        return dest
    finally:
        if tmp.exists():
            tmp.unlink()


def download(name: str, root: str | os.PathLike) -> Path:
    """Fetch dataset ``name``'s official files into ``root/<name>`` and return that folder.

    ``name`` is one of :data:`RESOURCES` or :data:`TEXT_RESOURCES`. Files already there with
    the right checksum are kept. For CIFAR, the archive is then
    unpacked into the same folder (giving e.g. ``cifar10/cifar-10-batches-bin/``) and deleted.
    """
    resource = RESOURCES.get(name) or TEXT_RESOURCES.get(name)
    if resource is None:
        raise LmcError(f"dataset {name!r} cannot be downloaded; it needs no files")
    folder = Path(root) / name
    algorithm = resource.algorithm
    for file_name, digest in resource.files.items():
        dest = folder / file_name
        if dest.is_file() and file_digest(dest, algorithm) == digest.lower():
            continue
        fetch(resource.base_url + file_name, dest, digest, algorithm=algorithm)
    if name in LAYOUTS:
        archive = folder / LAYOUTS[name].archive
        extract_archive(archive, folder)
        archive.unlink()
    return folder
