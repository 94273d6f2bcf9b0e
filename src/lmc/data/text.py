"""Text datasets for next-token prediction: a text cut by position into token windows.

Datasets (:data:`TEXT_DATASETS`; loaded through :func:`lmc.data.load`, which finds the files):

- ``text``: any UTF-8 file, option ``path`` (required). The file's text is used exactly as it
  is, less a leading byte-order mark. An empty file, one that is not UTF-8, or one holding NUL
  characters (binary) is refused.
- ``fortunes``: the offline default corpus, Debian's ``fortunes`` package (``apt-get install
  fortunes``: about 2.5 million characters of English quotations, jokes and verse in
  ``/usr/share/games/fortunes``). :func:`fortunes_text` builds it from the files
  :data:`FORTUNE_FILES` (all of the package's except ``ascii-art``, pictures, and
  ``translate-me``, not English): each file is cut into fortunes at its ``%`` lines, each
  fortune cleaned (:func:`clean_fortune`), blank ones dropped, repeated ones kept once (first
  occurrence), and the fortunes put in one seeded random order (``numpy default_rng(0)``) so that
  the train, validation and test blocks all mix every topic; they are joined by one blank line.
- ``tiny-shakespeare``: Karpathy's char-rnn ``input.txt`` (1,115,394 bytes of Shakespeare),
  fetched with ``download=True`` (``--download``) and checked against its SHA-256
  (:data:`lmc.data.download.TINY_SHAKESPEARE_SHA256`).

Options (all recorded in a run's ``dataset_options``: :func:`text_options` fills the defaults):

- ``tokenizer``: ``"char"`` (default), ``"bytes"``, or a local Hugging Face tokenizer folder
  (:mod:`lmc.data.tokenizers`). The char vocabulary is fitted on the training block only.
  A run records a folder's content beside its path, ``tokenizer_sha256``
  (:func:`lmc.data.tokenizers.tokenizer_folder_sha256`; only for a folder, so runs with
  ``char`` or ``bytes`` keep the identity they had), and a folder whose content no longer has
  that digest is refused, as a changed ``text`` file is.
- ``splits``: ``[train, validation, test]`` fractions of the text's *characters* (Unicode code
  points), each > 0, summing to 1; default ``[0.9, 0.05, 0.05]``. With ``n`` characters the
  blocks are ``text[:a]``, ``text[a:b]``, ``text[b:]`` with ``a = floor(train·n)`` and
  ``b = floor((train + validation)·n)`` (a product within 1e-9 of an integer counts as it).
  Each block is tokenized on its own.
- ``context`` (``T``, default 128) and ``stride`` (default ``T``: non-overlapping windows).
  A block of ``L`` tokens ``t`` gives ``N = floor((L − 1 − T) / stride) + 1`` windows: window
  ``i`` is ``x = t[i·stride : i·stride + T]`` with targets ``y = t[i·stride + 1 :
  i·stride + T + 1]`` (the next token at every position). A block with fewer than ``T + 1``
  tokens is an error. Windows are stored as copies: ``2·N·T·8`` bytes per split, so a stride
  below ``T`` costs ``T / stride`` times the memory of the text.

The result is a :class:`TextDataset` (a :class:`lmc.data.Dataset`): ``x_*``/``y_*`` are
``int64`` of shape ``(N, T)``, ``num_classes`` is the vocabulary size, ``input_shape`` is
``(T,)``, ``task`` is ``"next-token"``, ``augment`` is off and ``mean``/``std`` are empty
(token ids are not normalised). The validation block is ``x_val``/``y_val``, read with
``split("validation")``; ``split("train")`` and ``split("test")`` are as for every dataset.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import numbers
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lmc.config import LmcError, check_int, check_regular_file, resolve_device

from .dataset import Dataset
from .subsets import subset_count
from .tokenizers import (
    TOKENIZERS,
    CharTokenizer,
    Tokenizer,
    check_tokenizer_folder,
    make_tokenizer,
    tokenizer_folder_sha256,
)

#: The text datasets (next-token prediction), described above.
TEXT_DATASETS = ("text", "fortunes", "tiny-shakespeare")
#: The splits of a text dataset, in the order of the text: ``validation`` is its middle block.
TEXT_SPLITS = ("train", "validation", "test")
NEXT_TOKEN_TASK = "next-token"

DEFAULT_TOKENIZER = "char"
DEFAULT_CONTEXT = 128
DEFAULT_SPLITS = (0.9, 0.05, 0.05)
#: The options of every text dataset (``path`` is ``text``'s, and only its).
TEXT_OPTIONS = ("path", "sha256", "tokenizer", "tokenizer_sha256", "context", "stride", "splits")
#: How far from 1 the split fractions may add up.
SPLITS_TOL = 1e-9

#: Debian ``fortunes`` files making up the ``fortunes`` corpus, in this order before shuffling.
FORTUNE_FILES = (
    "art", "computers", "cookie", "debian", "definitions", "disclaimer", "drugs", "education",
    "ethnic", "food", "fortunes", "goedel", "humorists", "kids", "knghtbrd", "law", "linux",
    "linuxcookie", "literature", "love", "magic", "medicine", "men-women", "miscellaneous",
    "news", "paradoxum", "people", "perl", "pets", "platitudes", "politics", "pratchett",
    "riddles", "science", "songs-poems", "sports", "startrek", "tao", "wisdom", "work", "zippy",
)  # fmt: skip
#: Seed of the one fixed order of the fortunes (``numpy.random.default_rng``).
FORTUNES_SEED = 0


@dataclass(repr=False, eq=False, kw_only=True)
class TextDataset(Dataset):
    """A next-token dataset: token windows of one text (conventions: the module docstring).

    Beyond :class:`lmc.data.Dataset`: ``x_val``/``y_val`` (the validation block's windows),
    ``tokenizer`` (:mod:`lmc.data.tokenizers`; ``tokenizer.to_json()`` is what to save with a
    run), ``context`` (``T``), ``stride`` and ``splits`` (the three fractions).
    """

    x_val: torch.Tensor
    y_val: torch.Tensor
    tokenizer: Tokenizer
    context: int
    stride: int
    splits: tuple[float, float, float]
    task: str = NEXT_TOKEN_TASK

    def split(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(x, y)`` of the split ``"train"``, ``"validation"`` or ``"test"``."""
        if name == "validation":
            return self.x_val, self.y_val
        if name in ("train", "test"):
            return super().split(name)
        raise LmcError(f"unknown split {name!r}: use 'train', 'validation' or 'test'")

    def to(self, device: str | torch.device) -> TextDataset:
        """A copy whose six tensors live on ``device``; self is left unchanged."""
        moved = super().to(device)
        dev = moved.x_train.device
        return dataclasses.replace(moved, x_val=self.x_val.to(dev), y_val=self.y_val.to(dev))

    @property
    def vocab_size(self) -> int:
        """The number of token ids: ``num_classes``."""
        return self.num_classes

    def __repr__(self) -> str:
        return (
            f"TextDataset(name={self.name!r}, train={len(self.y_train)}, "
            f"validation={len(self.y_val)}, test={len(self.y_test)}, "
            f"vocab={self.num_classes}, context={self.context}, stride={self.stride}, "
            f"tokenizer={self.tokenizer.kind!r}, device={self.device})"
        )


# ---------------------------------------------------------------------------------------------
# options


def _check_splits(splits: Any) -> tuple[float, float, float]:
    if isinstance(splits, (str, bytes)) or not isinstance(splits, Sequence) or len(splits) != 3:
        raise LmcError(f"splits must be three fractions [train, validation, test], got {splits!r}")
    out = []
    for part, value in zip(TEXT_SPLITS, splits):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise LmcError(f"splits: the {part} fraction must be a number, got {value!r}")
        value = float(value)
        if not (math.isfinite(value) and 0.0 < value < 1.0):
            raise LmcError(f"splits: the {part} fraction must be in (0, 1), got {value:g}")
        out.append(value)
    total = sum(out)
    if abs(total - 1.0) > SPLITS_TOL:
        raise LmcError(f"splits {out} add up to {total:g}; the three fractions must add up to 1")
    return out[0], out[1], out[2]


#: The text options that name a file or a folder (``tokenizer`` when it is a folder).
PATH_OPTIONS = ("path", "tokenizer")


def absolute_paths(options: dict[str, Any]) -> dict[str, str]:
    """The absolute form (``~`` expanded, against the current folder, links kept) of each
    option of ``options`` that names a file or a folder (:data:`PATH_OPTIONS`): what a run
    records of where its data were (``data_paths`` in its ``metrics.json``), beside its config,
    which keeps the paths as given (they are part of its identity)."""
    out = {}
    for key in PATH_OPTIONS:
        value = options.get(key)
        if value is None or str(value) == "" or (key == "tokenizer" and str(value) in TOKENIZERS):
            continue
        out[key] = os.path.abspath(os.path.expanduser(str(value)))
    return out


def with_recorded_paths(options: dict[str, Any], recorded: dict[str, Any] | None) -> dict[str, Any]:
    """``options`` (a run's ``dataset_options``, paths as given) with each path option
    replaced by its absolute form ``recorded`` where the run was trained, when that file or
    folder still exists: so a run trained with a relative path is read from any folder. A
    recorded path that is gone (the project moved) leaves the option as given, read from the
    current folder. The recorded digests (``sha256``, ``tokenizer_sha256``) still decide
    whether what is read is what the run read."""
    out = dict(options)
    for key in PATH_OPTIONS:
        given, where = out.get(key), (recorded or {}).get(key)
        if given is None or not isinstance(where, str) or not os.path.isabs(where):
            continue
        if os.path.exists(where):
            out[key] = where
    return out


def _is_digest(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value) is not None


def text_options(
    name: str, options: dict[str, Any], *, record_digest: bool = False
) -> dict[str, Any]:
    """``options`` of text dataset ``name`` checked and completed with every default
    (``tokenizer``, ``context``, ``stride``, ``splits``; ``path`` for ``text``), as they belong
    in a run's ``dataset_options``. Other keys (the subset options) are passed through.
    A ``sha256`` given for ``text`` (``tokenizer_sha256`` for a tokenizer folder) is checked
    for form; ``record_digest`` adds the file's (the folder's) own when none is given (reading
    it: what a run records, :func:`file_sha256`,
    :func:`lmc.data.tokenizers.tokenizer_folder_sha256`).
    ``LmcError`` for a bad value, a missing ``path`` or a ``path`` given to a named corpus."""
    if name not in TEXT_DATASETS:
        raise LmcError(f"{name!r} is not a text dataset ({', '.join(TEXT_DATASETS)})")
    out = dict(options)
    if name == "text":
        path = out.get("path")
        if path is None or str(path) == "":
            raise LmcError("dataset 'text' needs the option path, the UTF-8 file to read")
        if not isinstance(path, (str, os.PathLike)):
            raise LmcError(f"path must be a file path, got {path!r}")
        out["path"] = str(path)
        if out.get("sha256") is None:
            out.pop("sha256", None)
            if record_digest:  # the file's content names the data, not only its path
                out["sha256"] = file_sha256(out["path"])
        elif not _is_digest(out["sha256"]):
            raise LmcError(f"sha256 must be 64 lowercase hex digits, got {out['sha256']!r}")
    elif "path" in out or "sha256" in out:
        raise LmcError(
            f"{name} is a fixed corpus and takes no path or sha256; use dataset 'text' for a file"
        )
    tokenizer = out.get("tokenizer", DEFAULT_TOKENIZER)
    if not isinstance(tokenizer, (str, os.PathLike)) or str(tokenizer).strip() == "":
        raise LmcError(f"tokenizer must be 'char', 'bytes' or a folder path, got {tokenizer!r}")
    out["tokenizer"] = str(tokenizer)
    if out["tokenizer"] in TOKENIZERS:
        if out.get("tokenizer_sha256") is not None:
            raise LmcError(
                f"tokenizer_sha256 names a tokenizer folder's content; tokenizer "
                f"{out['tokenizer']!r} has none"
            )
        out.pop("tokenizer_sha256", None)
    elif out.get("tokenizer_sha256") is None:
        out.pop("tokenizer_sha256", None)
        if record_digest:  # the folder's content names the tokens, not only its path
            out["tokenizer_sha256"] = tokenizer_folder_sha256(check_tokenizer_folder(tokenizer))
    elif not _is_digest(out["tokenizer_sha256"]):
        raise LmcError(
            f"tokenizer_sha256 must be 64 lowercase hex digits, got {out['tokenizer_sha256']!r}"
        )
    out["context"] = check_int("context", out.get("context", DEFAULT_CONTEXT), minimum=1)
    out["stride"] = check_int("stride", out.get("stride", out["context"]), minimum=1)
    out["splits"] = list(_check_splits(out.get("splits", DEFAULT_SPLITS)))
    return out


# ---------------------------------------------------------------------------------------------
# reading text


def decode_text(data: bytes, source: str) -> str:
    """``data`` as UTF-8 text (a leading byte-order mark dropped); ``LmcError`` naming
    ``source`` when it is empty, not UTF-8, or holds NUL characters (a binary file)."""
    if not data:
        raise LmcError(f"{source} is empty; a text dataset needs UTF-8 text")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise LmcError(
            f"{source} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start} "
            "does not decode); give a UTF-8 text file"
        ) from exc
    if "\x00" in text:
        raise LmcError(
            f"{source} holds NUL characters (offset {text.index(chr(0))}): a binary file, not text"
        )
    if not text:
        raise LmcError(f"{source} holds only a byte-order mark; a text dataset needs text")
    return text


def _file_bytes(path: str | os.PathLike) -> bytes:
    check_regular_file(path, "text file")
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise LmcError(f"cannot read text file {path}: {exc.strerror or exc}") from exc


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of the file ``path``'s bytes (hex): what a run's ``dataset_options`` record
    of a ``text`` file beside its path, so an edited file is never taken for the one a run
    read."""
    return hashlib.sha256(_file_bytes(path)).hexdigest()


def check_tokenizer_digest(folder: str | os.PathLike, sha256: str) -> None:
    """``LmcError`` unless the tokenizer folder's content still has the digest ``sha256``
    (:func:`lmc.data.tokenizers.tokenizer_folder_sha256`)."""
    if tokenizer_folder_sha256(check_tokenizer_folder(folder)) != sha256:
        raise LmcError(
            f"tokenizer folder {folder} has changed since it was recorded (the SHA-256 of its "
            f"tokenizer files is no longer {sha256[:12]}…): runs and studies made with it read "
            "other tokens; restore the folder or train anew"
        )


def read_text_file(path: str | os.PathLike, sha256: str | None = None) -> str:
    """The UTF-8 text of the file ``path`` (rules: :func:`decode_text`); with ``sha256``, an
    ``LmcError`` unless the file's bytes still have that digest."""
    data = _file_bytes(path)
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise LmcError(
            f"{path} has changed since it was recorded (its SHA-256 is no longer {sha256[:12]}…): "
            "runs and studies made from it read other text; restore the file or train anew"
        )
    return decode_text(data, str(path))


_OVERSTRIKE = re.compile(r"[^\n\x08]\x08")
_MOJIBAKE = re.compile(r"[\u00c2-\u00f4][\u0080-\u00bf]+")
_BLANK_HEAD = re.compile(r"\A(?:[ \t]*\n)+")
# Unicode's control characters (category Cc: U+0000-U+001F, U+007F-U+009F) but tab and newline
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _repair_mojibake(match: re.Match) -> str:
    run = match.group(0)
    try:
        return run.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return run


def clean_fortune(text: str) -> str:
    """One fortune as plain text: terminal overstrikes removed (``c`` BACKSPACE ``d`` becomes
    ``d``, as printed), UTF-8 read twice as Latin-1 repaired (``â\\x80\\x99`` becomes ``’``,
    runs that do not decode are kept), every other control character but newline and tab
    dropped, and leading blank lines and trailing whitespace stripped."""
    while "\x08" in text:
        cleaned = _OVERSTRIKE.sub("", text)
        if cleaned == text:
            break
        text = cleaned
    for _ in range(2):  # a few fortunes were re-encoded twice
        text = _MOJIBAKE.sub(_repair_mojibake, text)
    text = _CONTROL.sub("", text)
    return _BLANK_HEAD.sub("", text).rstrip()


def split_fortunes(text: str) -> list[str]:
    """The raw fortunes of one fortune file: the text between lines that hold only ``%``
    (trailing whitespace allowed), the empty ones dropped."""
    fortunes, lines = [], []
    for line in text.split("\n"):
        if line.rstrip() == "%":
            fortunes.append("\n".join(lines))
            lines = []
        else:
            lines.append(line)
    fortunes.append("\n".join(lines))
    return [f for f in fortunes if f.strip()]


def fortunes_text(folder: str | os.PathLike, files: Sequence[str] = FORTUNE_FILES) -> str:
    """The ``fortunes`` corpus from the fortune files ``files`` in ``folder`` (construction:
    the module docstring). ``LmcError`` for a missing or non-UTF-8 file."""
    folder = Path(folder)
    seen: set[str] = set()
    fortunes: list[str] = []
    for name in files:
        path = folder / name
        check_regular_file(path, "fortune file")
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise LmcError(f"cannot read fortune file {path}: {exc.strerror or exc}") from exc
        if not data:
            continue
        for raw in split_fortunes(decode_text(data, str(path))):
            fortune = clean_fortune(raw)
            if fortune and fortune not in seen:
                seen.add(fortune)
                fortunes.append(fortune)
    if not fortunes:
        raise LmcError(f"the fortune files in {folder} hold no fortunes")
    order = np.random.default_rng(FORTUNES_SEED).permutation(len(fortunes))
    return "\n\n".join(fortunes[i] for i in order) + "\n"


# ---------------------------------------------------------------------------------------------
# splitting and windows


def split_text(text: str, splits: Sequence[float]) -> tuple[str, str, str]:
    """The train, validation and test blocks of ``text`` by character position (boundaries:
    the module docstring)."""
    train, val, _ = _check_splits(splits)
    n = len(text)
    a = subset_count(train, n)
    b = max(a, subset_count(train + val, n))
    return text[:a], text[a:b], text[b:]


def window_count(num_tokens: int, context: int, stride: int) -> int:
    """How many windows of ``context`` tokens (plus one target) a block of ``num_tokens``
    tokens holds at ``stride``: ``floor((num_tokens − 1 − context) / stride) + 1``, or 0."""
    if num_tokens < context + 1:
        return 0
    return (num_tokens - 1 - context) // stride + 1


def make_windows(
    tokens: np.ndarray | torch.Tensor | Sequence[int], context: int, stride: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x, y)``, ``int64`` of shape ``(N, context)``: window ``i`` is
    ``tokens[i·stride : i·stride + context]`` and its targets the same window one token on.
    Both are fresh contiguous copies (they share no memory); ``N`` is :func:`window_count`."""
    context = check_int("context", context, minimum=1)
    stride = check_int("stride", stride, minimum=1)
    t = torch.as_tensor(np.asarray(tokens, dtype=np.int64)).reshape(-1)
    n = window_count(len(t), context, stride)
    if n == 0:
        empty = torch.zeros((0, context), dtype=torch.int64)
        return empty, empty.clone()
    x = t[:-1].unfold(0, context, stride)[:n].clone(memory_format=torch.contiguous_format)
    y = t[1:].unfold(0, context, stride)[:n].clone(memory_format=torch.contiguous_format)
    return x, y


def build_text_dataset(
    name: str,
    text: str,
    *,
    tokenizer: str | Tokenizer = DEFAULT_TOKENIZER,
    context: int = DEFAULT_CONTEXT,
    stride: int | None = None,
    splits: Sequence[float] = DEFAULT_SPLITS,
    source: str | None = None,
    device: str | torch.device = "cpu",
) -> TextDataset:
    """The :class:`TextDataset` of ``text``: split by position, each block tokenized, cut into
    windows (conventions: the module docstring). An unfitted char tokenizer is fitted on the
    training block. ``source`` names the text in errors (default ``name``): a block too short
    for one window is a one-line ``LmcError``."""
    source = source or name
    context = check_int("context", context, minimum=1)
    stride = context if stride is None else check_int("stride", stride, minimum=1)
    fractions = _check_splits(splits)
    if not text:
        raise LmcError(f"{source} is empty; a text dataset needs text")
    tok = make_tokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer
    blocks = split_text(text, fractions)
    if isinstance(tok, CharTokenizer) and tok.chars is None:
        tok.fit(blocks[0])
    windows = {}
    for part, block in zip(TEXT_SPLITS, blocks):
        ids = tok.encode_array(block)
        if len(ids) < context + 1:
            fraction = fractions[TEXT_SPLITS.index(part)]
            raise LmcError(
                f"{source}: the {part} split ({fraction:g} of {len(text)} characters) holds "
                f"{len(ids)} tokens, fewer than one window needs (context {context} + 1); "
                "lower context or give that split a larger fraction of splits"
            )
        windows[part] = make_windows(ids, context, stride)
    ds = TextDataset(
        name=name,
        x_train=windows["train"][0],
        y_train=windows["train"][1],
        x_test=windows["test"][0],
        y_test=windows["test"][1],
        num_classes=int(tok.vocab_size),
        input_shape=(context,),
        mean=(),
        std=(),
        augment=False,
        task=NEXT_TOKEN_TASK,
        x_val=windows["validation"][0],
        y_val=windows["validation"][1],
        tokenizer=tok,
        context=context,
        stride=stride,
        splits=fractions,
    )
    dev = resolve_device(device)
    return ds if dev.type == "cpu" else ds.to(dev)


def load_text(
    path: str | os.PathLike,
    *,
    tokenizer: str | Tokenizer = DEFAULT_TOKENIZER,
    context: int = DEFAULT_CONTEXT,
    stride: int | None = None,
    splits: Sequence[float] = DEFAULT_SPLITS,
    name: str | None = None,
    device: str | torch.device = "cpu",
) -> TextDataset:
    """The :class:`TextDataset` of the UTF-8 file ``path`` (``name``: the file's name by
    default); ``lmc.data.load("text", path=...)`` is the same with the options checked."""
    text = read_text_file(path)
    return build_text_dataset(
        name or Path(path).name,
        text,
        tokenizer=tokenizer,
        context=context,
        stride=stride,
        splits=splits,
        source=str(path),
        device=device,
    )
