"""Tokenizers of the text datasets: characters, bytes, or a local Hugging Face tokenizer.

Every tokenizer has ``kind``, ``vocab_size`` (the ids are ``0..vocab_size − 1``),
``encode(text) -> list[int]``, ``decode(ids) -> str`` and ``to_json() -> str``;
:func:`tokenizer_from_json` rebuilds one from that JSON text (saved with a run, it reads the
run's text as the run was trained to).

- ``char`` (:class:`CharTokenizer`): one id per Unicode code point. The vocabulary is the
  sorted set of the characters of the *training* split only (:meth:`CharTokenizer.fit`),
  id ``i`` the ``i``-th of them; one more id, ``unknown_id = len(chars)`` (the last), is
  reserved for every character not in it (met in validation or test text), so
  ``vocab_size = len(chars) + 1``. Its JSON holds the characters.
- ``bytes`` (:class:`ByteTokenizer`): the UTF-8 bytes, 256 ids, nothing to save or fit.
- ``hf`` (:class:`HFTokenizer`): ``transformers.AutoTokenizer.from_pretrained(folder,
  local_files_only=True)`` of a local folder (e.g. a GPT-2 checkpoint's, so the model reads
  text with the tokens it was trained on); no special tokens are added;
  ``vocab_size = len(tokenizer)`` (added tokens included). ``transformers`` is the optional
  extra ``lmc[hf]``, imported only here. Its JSON holds the folder path.

:func:`make_tokenizer` turns the dataset option ``tokenizer`` (``"char"``, ``"bytes"`` or a
folder path) into an unfitted tokenizer.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lmc.config import LmcError

TOKENIZERS = ("char", "bytes")  # plus a local Hugging Face folder
#: What ``CharTokenizer.decode`` writes for the unknown id.
UNKNOWN_TEXT = "\ufffd"


def _first_line(exc: BaseException) -> str:
    """The library's message in one line: its first line, or all its lines joined when the
    first ends on a colon (a list follows), at most 300 characters."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    text = " ".join(lines) if lines[0].endswith(":") else lines[0]
    return text if len(text) <= 300 else text[:299] + "…"


#: Suffixes of the files of a model folder that hold weights, never a tokenizer's: left out of
#: a tokenizer folder's digest (:func:`tokenizer_folder_sha256`), so retraining the model saved
#: beside its tokenizer does not rename the runs that read text with that tokenizer.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx",
                   ".gguf", ".npz")  # fmt: skip


def tokenizer_files(folder: str | os.PathLike) -> list[Path]:
    """The files of a tokenizer folder that name its tokenizer: every regular file directly in
    it (links followed) but weight files (:data:`WEIGHT_SUFFIXES`) and their ``*.index.json``
    shard indexes, sorted by name. Hugging Face reads a tokenizer only from such files
    (``tokenizer.json``, ``tokenizer_config.json``, ``vocab.json``, ``merges.txt``, a
    SentencePiece ``*.model``, ``special_tokens_map.json``; ``config.json`` when the tokenizer
    config does not name its class)."""
    root = Path(folder).expanduser()
    try:
        entries = sorted(root.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        raise LmcError(f"cannot read tokenizer folder {folder}: {exc.strerror or exc}") from exc
    return [
        p
        for p in entries
        if p.is_file()
        and not p.name.lower().endswith(WEIGHT_SUFFIXES)
        and not p.name.lower().endswith(".index.json")
    ]


def tokenizer_folder_sha256(folder: str | os.PathLike) -> str:
    """The SHA-256 (hex) that names a tokenizer folder's content: of each file of
    :func:`tokenizer_files`, in name order, its name, its size and its bytes. What a run's
    ``dataset_options`` record beside the folder's path (``tokenizer_sha256``), so a tokenizer
    replaced in the same folder is never taken for the one a run was trained with."""
    digest = hashlib.sha256()
    for path in tokenizer_files(folder):
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise LmcError(f"cannot read tokenizer file {path}: {exc.strerror or exc}") from exc
        name = path.name.encode("utf-8", errors="surrogateescape")
        digest.update(len(name).to_bytes(8, "little") + name)
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()


class Tokenizer:
    """The interface (see the module docstring)."""

    kind = ""

    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: Iterable[int]) -> str:
        raise NotImplementedError

    def encode_array(self, text: str) -> np.ndarray:
        """``encode(text)`` as an ``int64`` numpy array (faster where a tokenizer can)."""
        return np.asarray(self.encode(text), dtype=np.int64)

    def to_json(self) -> str:
        return json.dumps(self._state(), sort_keys=True, ensure_ascii=False)

    def _state(self) -> dict[str, Any]:
        return {"kind": self.kind}

    @classmethod
    def from_json(cls, text: str) -> Tokenizer:
        """The tokenizer ``to_json`` described (any kind: :func:`tokenizer_from_json`)."""
        tok = tokenizer_from_json(text)
        if not isinstance(tok, cls):
            raise LmcError(f"the JSON describes a {tok.kind!r} tokenizer, not {cls.kind!r}")
        return tok

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._state() == self._state()

    def __hash__(self) -> int:
        return hash(json.dumps(self._state(), sort_keys=True))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size})"


class CharTokenizer(Tokenizer):
    """Characters of the training text, sorted; the last id is for unknown characters.

    ``CharTokenizer()`` is unfitted (no vocabulary yet): :meth:`fit` on the training split's
    text, or build it with ``chars`` (any order; sorted and deduplicated here).
    """

    kind = "char"

    def __init__(self, chars: Iterable[str] | None = None) -> None:
        self.chars: tuple[str, ...] | None = None
        self._ids: dict[str, int] = {}
        if chars is not None:
            chars = list(chars)
            for c in chars:
                if not isinstance(c, str) or len(c) != 1:
                    raise LmcError(f"a char vocabulary holds single characters, got {c!r}")
            self._set(sorted(set(chars)))

    def _set(self, chars: Sequence[str]) -> None:
        self.chars = tuple(chars)
        self._ids = {c: i for i, c in enumerate(self.chars)}

    def fit(self, text: str) -> CharTokenizer:
        """Take the sorted distinct characters of ``text`` (the training split) as the
        vocabulary; returns self."""
        self._set(sorted(set(text)))
        return self

    def _need_fit(self) -> tuple[str, ...]:
        if self.chars is None:
            raise LmcError("the char tokenizer has no vocabulary yet: fit it on training text")
        return self.chars

    @property
    def unknown_id(self) -> int:
        """The id of every character outside the vocabulary: ``len(chars)``."""
        return len(self._need_fit())

    @property
    def vocab_size(self) -> int:
        return len(self._need_fit()) + 1

    def encode(self, text: str) -> list[int]:
        unknown = self.unknown_id
        ids = self._ids
        return [ids.get(c, unknown) for c in text]

    def encode_array(self, text: str) -> np.ndarray:
        chars = self._need_fit()
        points = np.frombuffer(
            text.encode("utf-32-le", errors="surrogatepass"), dtype=np.uint32
        ).astype(np.int64)
        vocab = np.array([ord(c) for c in chars], dtype=np.int64)  # sorted: str order = ord
        if len(vocab) == 0:
            return np.full(len(points), self.unknown_id, dtype=np.int64)
        at = np.minimum(np.searchsorted(vocab, points), len(vocab) - 1)
        return np.where(vocab[at] == points, at, self.unknown_id).astype(np.int64)

    def decode(self, ids: Iterable[int]) -> str:
        chars = self._need_fit()
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i <= len(chars):
                raise LmcError(f"token id {i} is outside the vocabulary 0..{len(chars)}")
            out.append(chars[i] if i < len(chars) else UNKNOWN_TEXT)
        return "".join(out)

    def _state(self) -> dict[str, Any]:
        return {"kind": self.kind, "chars": None if self.chars is None else list(self.chars)}

    def to_json(self) -> str:
        self._need_fit()  # an unfitted vocabulary has nothing to save
        return super().to_json()


class ByteTokenizer(Tokenizer):
    """The UTF-8 bytes of the text: ids 0..255."""

    kind = "bytes"

    @property
    def vocab_size(self) -> int:
        return 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def encode_array(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)

    def decode(self, ids: Iterable[int]) -> str:
        values = [int(i) for i in ids]
        bad = [i for i in values if not 0 <= i < 256]
        if bad:
            raise LmcError(f"token id {bad[0]} is outside the byte vocabulary 0..255")
        return bytes(values).decode("utf-8", errors="replace")


def check_tokenizer_folder(folder: str | os.PathLike) -> Path:
    """``folder`` as a path, or ``LmcError`` when it is not a folder."""
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise LmcError(
            f"tokenizer {str(folder)!r} is not 'char', 'bytes' or a folder (a Hugging "
            "Face tokenizer folder, as save_pretrained writes it)"
        )
    return path


class HFTokenizer(Tokenizer):
    """A Hugging Face tokenizer read from a local folder (``save_pretrained`` layout)."""

    kind = "hf"

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = str(folder)
        path = check_tokenizer_folder(folder)
        if not tokenizer_files(path):
            raise LmcError(
                f"tokenizer folder {self.folder} holds no tokenizer files (such as "
                "tokenizer.json or tokenizer_config.json); give the folder a tokenizer's "
                "save_pretrained wrote, or 'char' or 'bytes'"
            )
        try:
            import transformers
        except ImportError as exc:
            raise LmcError(
                f"tokenizer folder {self.folder} needs the transformers package: "
                "pip install 'lmc[hf]'"
            ) from exc
        try:
            logging = transformers.utils.logging
            verbosity = logging.get_verbosity()
            logging.set_verbosity_error()  # its warnings are no part of lmc's output
            try:
                self._tok = transformers.AutoTokenizer.from_pretrained(
                    str(path), local_files_only=True
                )
            finally:
                logging.set_verbosity(verbosity)
        except Exception as exc:
            raise LmcError(
                f"tokenizer folder {self.folder} does not load: {_first_line(exc)}"
            ) from exc
        try:
            size = len(self._tok)
        except Exception as exc:
            raise LmcError(f"tokenizer folder {self.folder} holds no usable tokenizer") from exc
        if size < 1:
            raise LmcError(f"tokenizer folder {self.folder} holds an empty vocabulary")

    @property
    def vocab_size(self) -> int:
        return len(self._tok)

    def encode(self, text: str) -> list[int]:
        out = self._tok(text, add_special_tokens=False, verbose=False)
        return [int(i) for i in out["input_ids"]]

    def decode(self, ids: Iterable[int]) -> str:
        return self._tok.decode([int(i) for i in ids])

    def _state(self) -> dict[str, Any]:
        return {"kind": self.kind, "folder": self.folder}


def make_tokenizer(spec: str) -> Tokenizer:
    """The tokenizer the dataset option ``tokenizer`` names: ``"char"`` (unfitted),
    ``"bytes"``, or the path of a local Hugging Face tokenizer folder."""
    if not isinstance(spec, str) or not spec.strip():
        raise LmcError(f"tokenizer must be 'char', 'bytes' or a folder path, got {spec!r}")
    if spec == "char":
        return CharTokenizer()
    if spec == "bytes":
        return ByteTokenizer()
    return HFTokenizer(spec)


def tokenizer_from_json(text: str) -> Tokenizer:
    """The tokenizer whose ``to_json()`` is ``text``; ``LmcError`` for anything else."""
    try:
        state = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise LmcError(f"a tokenizer's JSON does not parse: {_first_line(exc)}") from exc
    kind = state.get("kind") if isinstance(state, dict) else None
    if kind == "char":
        chars = state.get("chars")
        if not isinstance(chars, list):
            raise LmcError("a char tokenizer's JSON needs 'chars', the list of its characters")
        return CharTokenizer(chars)
    if kind == "bytes":
        return ByteTokenizer()
    if kind == "hf":
        folder = state.get("folder")
        if not isinstance(folder, str):
            raise LmcError("an hf tokenizer's JSON needs 'folder', the tokenizer's folder")
        return HFTokenizer(folder)
    raise LmcError(f"a tokenizer's JSON has kind {kind!r}; expected 'char', 'bytes' or 'hf'")
