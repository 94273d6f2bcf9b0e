"""Weights too large to hold twice: safetensors files read lazily and written tensor by tensor.

:class:`LazyStateDict` is a read-only mapping name -> tensor over one safetensors file. Each
tensor is memory-mapped when it is looked up (``safetensors.safe_open``): nothing is read until
it is used, its pages are the file's (the kernel may drop them again), and a lookup costs no
copy. ``aliases`` name tensors a file stores once for two names (a tied LM head:
``{"lm_head.weight": "transformer.wte.weight"}``, as Hugging Face's ``save_pretrained`` writes
GPT-2).

:func:`write_tensors` writes a safetensors file from a list of names and a function that makes
one tensor at a time, so a transformed copy of a model never exists whole in memory: the header
(names, dtypes, shapes, offsets) goes first, then each tensor's bytes as it is made, into a
temporary file renamed into place at the end (nothing is left at ``path`` if it fails). The
result is an ordinary safetensors file (``safetensors.torch.load_file`` reads it).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from lmc.config import LmcError

from .atomic import atomic_path

#: torch dtype -> the safetensors format's name for it.
DTYPE_NAMES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}


class LazyStateDict(Mapping[str, torch.Tensor]):
    """A safetensors file as a read-only state dict whose tensors are memory-mapped on lookup
    (module docstring). Use it as a context manager, or :meth:`close` it, to release the file.

    ``aliases``: extra names -> the stored name they read (a tied weight); an alias of a name
    the file lacks is an ``LmcError``."""

    def __init__(self, path: str | Path, aliases: Mapping[str, str] | None = None) -> None:
        self.path = Path(path)
        try:
            self._file = safe_open(str(self.path), framework="pt", device="cpu")
        except (SafetensorError, OSError) as exc:
            raise LmcError(f"cannot read {self.path} as a safetensors file: {exc}") from None
        self._stored = list(self._file.keys())
        stored = set(self._stored)
        self.aliases = dict(aliases or {})
        for alias, target in self.aliases.items():
            if target not in stored:
                raise LmcError(f"{self.path}: alias {alias!r} names {target!r}, not in the file")
        self._names = self._stored + [a for a in self.aliases if a not in stored]

    @property
    def stored_names(self) -> list[str]:
        """The names the file stores, in its order (aliases left out)."""
        return list(self._stored)

    def __getitem__(self, name: str) -> torch.Tensor:
        stored = self.aliases.get(name, name)
        if stored not in self._stored:
            raise KeyError(name)
        return self._file.get_tensor(stored)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self.aliases or name in self._stored

    def metadata(self) -> dict[str, str] | None:
        """The file's ``__metadata__`` (``None`` when it has none)."""
        return self._file.metadata()

    def nbytes(self) -> int:
        """The stored tensors' bytes (each stored tensor once)."""
        return sum(
            t.numel() * t.element_size() for t in (self._file.get_tensor(n) for n in self._stored)
        )

    def close(self) -> None:
        self._file = None

    def __enter__(self) -> LazyStateDict:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_tensors(
    path: str | Path,
    layout: Sequence[tuple[str, torch.dtype, Sequence[int]]],
    make: Callable[[str], torch.Tensor],
    metadata: Mapping[str, str] | None = None,
) -> Path:
    """Write a safetensors file of the tensors ``layout`` lists (name, dtype, shape; in file
    order), calling ``make(name)`` for each in turn and keeping only that one in memory
    (module docstring). A made tensor whose dtype or shape differs from its layout entry is an
    ``LmcError``. Returns ``path``."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name, dtype, shape in layout:
        if dtype not in DTYPE_NAMES:
            raise LmcError(f"cannot write {name!r}: dtype {dtype} has no safetensors name")
        size = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
        header[name] = {
            "dtype": DTYPE_NAMES[dtype],
            "shape": [int(s) for s in shape],
            "data_offsets": [offset, offset + size],
        }
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data start 8-byte aligned, as safetensors writes it
    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        handle.write(struct.pack("<Q", len(text)))
        handle.write(text)
        for name, dtype, shape in layout:
            tensor = make(name)
            if tensor.dtype != dtype or tuple(tensor.shape) != tuple(shape):
                raise LmcError(
                    f"{name!r}: made {tensor.dtype} {list(tensor.shape)}, the layout says "
                    f"{dtype} {list(shape)}"
                )
            data = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
            handle.write(data.numpy().tobytes())
            del tensor, data
    return path


def layout_of(state: LazyStateDict) -> list[tuple[str, torch.dtype, tuple[int, ...]]]:
    """The (name, dtype, shape) of every tensor ``state``'s file stores, in its order."""
    out = []
    for name in state.stored_names:
        tensor = state[name]
        out.append((name, tensor.dtype, tuple(tensor.shape)))
    return out


__all__ = ["DTYPE_NAMES", "LazyStateDict", "layout_of", "write_tensors"]
