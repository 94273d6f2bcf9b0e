"""The text of ``lmc VERB --help``, kept on disk so that asking again costs no torch import.

Most verbs read their options from registries that import torch (the model zoo's entries, the
alignment methods' records, the curve and calibration settings): building their parser costs
2-4 s, almost all of it ``import torch``. The help text is a pure function of lmc's own files
(sources and recipes), the Python and packages it runs on, the terminal (its width; whether
it is one, and the colour variables, which decide argparse's colours from Python 3.14) and
the verb, so ``lmc VERB --help``
(exactly that command line: ``-h`` or ``--help`` after the verb and nothing else) prints the
text stored by the last call with the same :func:`help_key`, and otherwise builds the parser,
prints its help and stores it. The first call after installing or editing lmc pays the import;
the next ones answer in well under a second (``lmc --help``, ``lmc recipes`` and the verbs whose
parser imports no torch never needed this).

Where: ``$LMC_HELP_CACHE`` when set (an empty value turns the cache off), else
``$XDG_CACHE_HOME/lmc/help`` (``~/.cache/lmc/help`` when unset): one file per verb,
``<verb>.json`` = ``{"key": ..., "text": ...}``. A folder that cannot be written is no error:
the help is then built every time. This module imports nothing but the standard library.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import lmc
from lmc.config.user_cache import cache_place

CACHE_ENV = "LMC_HELP_CACHE"
#: what decides whether argparse colours its help (Python >= 3.14) besides the terminal
COLOUR_ENV = ("NO_COLOR", "FORCE_COLOR", "PYTHON_COLORS", "TERM")
#: packages whose installed version can change what a verb's help lists (their install folder
#: and its modification time enter the key: a reinstall changes it)
PACKAGES = ("torch", "transformers", "safetensors", "numpy", "scipy")


def cache_folder() -> Path | None:
    """``$LMC_HELP_CACHE`` (empty: no cache), else ``$XDG_CACHE_HOME/lmc/help``."""
    return cache_place(CACHE_ENV, "help")


def _source_state() -> list[str]:
    """Every file of the installed lmc package (sources, recipes, data: ``lmc sweep --help``
    lists the recipes) by its path and a hash of its contents (about 15 ms for all of them)."""
    root = Path(lmc.__file__).resolve().parent
    rows = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            rows.append(f"{path.relative_to(root)}:{digest}")
    return rows


def _package_state(name: str) -> str:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin:
        return f"{name}:absent"
    try:
        return f"{name}:{spec.origin}:{os.stat(spec.origin).st_mtime_ns}"
    except OSError:
        return f"{name}:{spec.origin}"


def help_key(verb: str) -> str:
    """What the help text of ``verb`` depends on, hashed: lmc's version and the contents of
    every file of the package, the interpreter, the install of :data:`PACKAGES`, the terminal's
    width (argparse wraps to it), whether standard output is a terminal and the variables of
    :data:`COLOUR_ENV` (argparse colours help from Python 3.14 on), and ``$LMC_*``."""
    parts = [
        verb,
        lmc.__version__,
        sys.version,
        str(shutil.get_terminal_size().columns),
        f"tty={bool(sys.stdout is not None and sys.stdout.isatty())}",
        *(f"{k}={os.environ.get(k)}" for k in COLOUR_ENV),
        *(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("LMC_")),
        *(_package_state(name) for name in PACKAGES),
        *_source_state(),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def stored_help(verb: str, key: str) -> str | None:
    """The stored help text of ``verb`` when it was stored under ``key`` (:func:`help_key`),
    else ``None``."""
    folder = cache_folder()
    if folder is None:
        return None
    try:
        record = json.loads((folder / f"{verb}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or record.get("key") != key:
        return None
    text = record.get("text")
    return text if isinstance(text, str) else None


def store_help(verb: str, key: str, text: str) -> None:
    """Keep ``text`` as the help of ``verb`` under ``key``, the key computed before the parser
    was built (an edit meanwhile then leaves a record no later key matches). Written whole,
    then renamed; failures are ignored."""
    folder = cache_folder()
    if folder is None:
        return
    target = folder / f"{verb}.json"
    partial = target.with_name(f".{verb}.{os.getpid()}.partial")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps({"key": key, "text": text}), encoding="utf-8")
        os.replace(partial, target)
    except OSError:
        try:
            partial.unlink(missing_ok=True)
        except OSError:
            pass


__all__ = ["CACHE_ENV", "cache_folder", "help_key", "store_help", "stored_help"]
