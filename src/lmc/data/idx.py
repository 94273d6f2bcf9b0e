"""A small reader for the IDX format used by MNIST and Fashion-MNIST.

Layout: two zero bytes, one type byte, one byte ``ndim``; then ``ndim`` big-endian ``uint32``
sizes; then the values in C order, big-endian. Files may be gzipped (detected from the gzip
magic bytes, not the file name).
"""

from __future__ import annotations

import gzip
import math
import os
import zlib

import numpy as np

from lmc.config import LmcError, read_regular_bytes

# IDX type byte -> big-endian numpy dtype.
IDX_DTYPES: dict[int, str] = {
    0x08: "u1",
    0x09: "i1",
    0x0B: ">i2",
    0x0C: ">i4",
    0x0D: ">f4",
    0x0E: ">f8",
}

_GZIP_MAGIC = b"\x1f\x8b"


def _fail(path: str | os.PathLike, what: str) -> LmcError:
    return LmcError(
        f"{path} is not a valid IDX file ({what}); delete it and fetch it again "
        "(--download, or copy the original file)"
    )


def read_bytes(path: str | os.PathLike) -> bytes:
    """The file's bytes, gunzipped when it starts with the gzip magic. Errors name the file."""
    try:
        data = read_regular_bytes(path, "IDX file")
    except OSError as exc:
        raise LmcError(f"cannot read {path}: {exc.strerror or exc}; check the file") from exc
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise _fail(path, f"corrupt or truncated gzip data: {exc}") from exc
    return data


def parse_idx(data: bytes, source: str | os.PathLike = "<bytes>") -> np.ndarray:
    """Parse uncompressed IDX bytes into an array in native byte order (``source`` names errors).

    ``uint8`` data is returned as a read-only view of ``data`` (no copy).
    """
    if len(data) < 4:
        raise _fail(source, f"only {len(data)} bytes, shorter than the 4-byte header")
    if data[0] != 0 or data[1] != 0 or data[2] not in IDX_DTYPES:
        raise _fail(source, f"bad magic number 0x{data[:4].hex()}")
    ndim = data[3]
    header = 4 + 4 * ndim
    if ndim == 0:
        raise _fail(source, "zero dimensions")
    if len(data) < header:
        raise _fail(source, f"truncated header: {len(data)} bytes, {ndim} dimensions need {header}")
    dims = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    dtype = np.dtype(IDX_DTYPES[data[2]])
    expected = header + math.prod(dims) * dtype.itemsize
    if len(data) < expected:
        raise _fail(source, f"truncated: {len(data)} bytes, shape {dims} needs {expected}")
    if len(data) > expected:
        raise _fail(
            source, f"{len(data) - expected} unexpected bytes after the data of shape {dims}"
        )
    arr = np.frombuffer(data, dtype=dtype, count=math.prod(dims), offset=header).reshape(dims)
    if dtype.byteorder == ">":
        arr = arr.astype(dtype.newbyteorder("="))
    return arr


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file (raw or gzipped) into a numpy array of its stored shape and type.

    A missing, truncated or corrupt file raises :class:`LmcError` naming the file.
    """
    return parse_idx(read_bytes(path), path)
