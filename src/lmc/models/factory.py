"""The user's own model: a factory given as text, a local Hugging Face folder, weight files.

``lmc align/interpolate/analyze`` accept, besides runs, a model built by a zero-argument
callable and two weight files:

- :func:`load_factory` turns ``"package.module:make"`` (an importable module) or
  ``"path/to/file.py:make"`` (a file, imported by path) into that callable; dotted
  attributes (``"model.py:TinyNet.small"``) are followed. The callable's result is checked to be
  an ``nn.Module``.
- :func:`load_hf_folder` builds the model a local Hugging Face folder describes
  (``config.json`` plus weights, read with ``from_pretrained(..., local_files_only=True)``),
  wrapped in :class:`HFLogits` so that ``model(x)`` returns the logits tensor the metrics
  need. ``transformers`` is the optional extra ``lmc[hf]``.
- :func:`load_weights` loads a ``.safetensors`` file (never unpickled) or a
  ``.pt``/``.pth``/``.bin`` file through ``torch.load(..., weights_only=True)`` only (a
  pickle holding anything but tensors and plain containers is refused), strictly: every
  tensor of the model must be in the file with its shape, and nothing else.

Every failure is one-line :class:`lmc.config.LmcError` naming the file, module or tensor.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lmc.config import LmcError
from lmc.config.validate import check_finite

__all__ = [
    "SAFETENSORS_SUFFIXES",
    "TORCH_SUFFIXES",
    "HFLogits",
    "export_state",
    "load_factory",
    "load_hf_folder",
    "load_weights",
    "quiet_transformers",
    "read_weights",
]

SAFETENSORS_SUFFIXES = (".safetensors",)
TORCH_SUFFIXES = (".pt", ".pth", ".bin")
# keys of a training checkpoint that hold the model's state dict (first found is used)
STATE_KEYS = ("state_dict", "model_state", "model_state_dict")
# weight files looked for in a folder given as a weight file (a save_pretrained folder)
FOLDER_WEIGHTS = ("model.safetensors", "pytorch_model.bin")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    message = text[0] if text else ""
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _shape(t: torch.Tensor) -> str:
    return "(" + ", ".join(str(d) for d in t.shape) + ")"


# ---------------------------------------------------------------------------------------------
# factories


def _import_file(path: Path, spec_text: str):
    """Import the Python file ``path`` as a module of its own (its folder first on sys.path
    while it runs, so it may import its neighbours)."""
    if not path.is_file():
        raise LmcError(f"--model-factory {spec_text!r}: file {path} does not exist")
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    name = f"lmc_user_{path.stem.replace('-', '_')}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise LmcError(f"--model-factory {spec_text!r}: cannot import {path} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up by name
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise LmcError(
            f"--model-factory {spec_text!r}: importing {path} failed: {_first_line(exc)}"
        ) from exc
    finally:
        if sys.path and sys.path[0] == folder:
            del sys.path[0]
    return module


def _import_module(module_name: str, spec_text: str):
    try:
        return importlib.import_module(module_name)
    except Exception as exc:
        raise LmcError(
            f"--model-factory {spec_text!r}: cannot import module {module_name!r}: "
            f"{_first_line(exc)}"
        ) from exc


def load_factory(spec: str) -> Callable[[], nn.Module]:
    """The zero-argument callable ``spec`` names, wrapped so that calling it returns an
    ``nn.Module`` or raises a one-line ``LmcError``.

    ``spec`` is ``"module:callable"`` (``module`` importable, e.g. ``mypkg.models``) or
    ``"path/to/file.py:callable"`` (a ``.py`` file, or any text with a path separator, is
    imported by path). ``callable`` may be dotted (``Class.method``). The callable is called
    with no arguments, once per model built.
    """
    if not isinstance(spec, str) or ":" not in spec:
        raise LmcError(
            f"--model-factory must be module:callable or path/to/file.py:callable, got {spec!r}"
        )
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise LmcError(
            f"--model-factory must be module:callable or path/to/file.py:callable, got {spec!r}"
        )
    is_file = where.endswith(".py") or "/" in where or os.sep in where
    module = _import_file(Path(where), spec) if is_file else _import_module(where, spec)
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            owner = where if target is module else f"{where}:{attr}"
            raise LmcError(f"--model-factory {spec!r}: {owner} has no attribute {part!r}")
        target = getattr(target, part)
    if not callable(target):
        raise LmcError(
            f"--model-factory {spec!r}: {attr} is a {type(target).__name__}, not a callable "
            "that returns an nn.Module"
        )

    def make() -> nn.Module:
        try:
            model = target()
        except Exception as exc:
            raise LmcError(
                f"--model-factory {spec!r}: calling {attr}() failed: {_first_line(exc)}"
            ) from exc
        if not isinstance(model, nn.Module):
            raise LmcError(
                f"--model-factory {spec!r}: {attr}() returned a {type(model).__name__}, "
                "not an nn.Module"
            )
        return model

    make.__name__ = attr.rsplit(".", 1)[-1]
    make.__qualname__ = spec
    return make


# ---------------------------------------------------------------------------------------------
# Hugging Face folders


class HFLogits(nn.Module):
    """A Hugging Face model whose ``forward(x)`` returns the logits tensor ``(N, C)``.

    ``x``: integer token ids ``(N, L)`` are passed as ``input_ids``; floating inputs as the
    model's first positional argument (e.g. ``pixel_values``). The state dict is the wrapped
    model's under the prefix ``hf.`` (:func:`load_weights` and :func:`export_state` drop it,
    so weight files keep Hugging Face's names).
    """

    def __init__(self, hf_model: nn.Module) -> None:
        super().__init__()
        self.hf = hf_model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.hf(input_ids=x) if not x.is_floating_point() else self.hf(x)
        logits = getattr(out, "logits", None)
        if logits is None:
            logits = out[0] if isinstance(out, (tuple, list)) else out
        if not isinstance(logits, torch.Tensor):
            raise LmcError(
                f"{type(self.hf).__name__} returned no logits tensor; use a model with a "
                "classification head (e.g. *ForSequenceClassification)"
            )
        return logits


def _transformers():
    try:
        import transformers
    except ImportError as exc:
        raise LmcError("--hf-model needs the transformers package: pip install 'lmc[hf]'") from exc
    return transformers


@contextlib.contextmanager
def quiet_transformers(quiet: bool = True) -> Iterator[None]:
    """With ``quiet``, silence ``transformers`` inside the block: its progress bars (e.g.
    "Loading weights") off and its logging at errors only; both restored after. Without
    ``quiet`` (or without ``transformers``) nothing changes."""
    transformers = sys.modules.get("transformers") if quiet else None
    if transformers is None and quiet:
        try:
            import transformers
        except ImportError:
            transformers = None
    if transformers is None:
        yield
        return
    logging = transformers.utils.logging
    bars, verbosity = logging.is_progress_bar_enabled(), logging.get_verbosity()
    logging.disable_progress_bar()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()


def load_hf_folder(path: str | os.PathLike, *, quiet: bool = False) -> Callable[[], nn.Module]:
    """A zero-argument callable building the model of the local Hugging Face folder ``path``
    (``config.json`` and its weights, as ``save_pretrained`` writes them), wrapped in
    :class:`HFLogits`, in eval mode.

    The class is the config's ``architectures[0]`` when ``transformers`` has it, else
    ``AutoModelForSequenceClassification``. Nothing is downloaded (``local_files_only=True``).
    ``quiet``: no progress bars or log lines of ``transformers`` while it loads
    (:func:`quiet_transformers`).
    """
    folder = Path(path)
    if not folder.is_dir():
        raise LmcError(f"--hf-model {folder}: not a folder (give a save_pretrained folder)")
    if not (folder / "config.json").is_file():
        raise LmcError(f"--hf-model {folder}: no config.json (not a Hugging Face model folder)")
    transformers = _transformers()
    try:
        with quiet_transformers(quiet):
            config = transformers.AutoConfig.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:
        raise LmcError(f"--hf-model {folder}: cannot read config.json: {_first_line(exc)}") from exc
    names = list(getattr(config, "architectures", None) or [])
    cls = getattr(transformers, names[0], None) if names else None
    if cls is None:
        cls = transformers.AutoModelForSequenceClassification

    def make() -> nn.Module:
        try:
            with quiet_transformers(quiet):
                model = cls.from_pretrained(str(folder), local_files_only=True)
        except Exception as exc:
            raise LmcError(
                f"--hf-model {folder}: {cls.__name__}.from_pretrained failed: {_first_line(exc)}"
            ) from exc
        return HFLogits(model).eval()

    make.__name__ = cls.__name__
    make.__qualname__ = str(folder)
    return make


# ---------------------------------------------------------------------------------------------
# weights


def _weight_file(path: Path) -> Path:
    """``path``, or the weights inside a ``save_pretrained`` folder."""
    if path.is_dir():
        for name in FOLDER_WEIGHTS:
            if (path / name).is_file():
                return path / name
        raise LmcError(
            f"{path} is a folder without {' or '.join(FOLDER_WEIGHTS)}: give a weight file"
        )
    if not path.is_file():
        raise LmcError(f"weight file {path} does not exist")
    return path


def read_weights(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The state dict in ``path`` on the CPU: ``.safetensors`` (no unpickling) or
    ``.pt``/``.pth``/``.bin`` through ``torch.load(path, map_location="cpu",
    weights_only=True)``, either a state dict or a dict holding one under ``state_dict``,
    ``model_state`` or ``model_state_dict``. A folder stands for its ``model.safetensors``
    (or ``pytorch_model.bin``)."""
    path = _weight_file(Path(path))
    suffix = path.suffix.lower()
    if suffix in SAFETENSORS_SUFFIXES:
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            state: Any = load_file(str(path), device="cpu")
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise LmcError(
                f"{path} is not a readable safetensors file: {_first_line(exc)}"
            ) from exc
    elif suffix in TORCH_SUFFIXES:
        try:
            state = torch.load(str(path), map_location="cpu", weights_only=True)
        except Exception as exc:
            raise LmcError(
                f"{path} cannot be read with torch.load(weights_only=True), which allows only "
                f"tensors and plain containers (save a state dict, or .safetensors): "
                f"{_first_line(exc)}"
            ) from exc
        if isinstance(state, Mapping):
            for key in STATE_KEYS:
                if isinstance(state.get(key), Mapping):
                    state = state[key]
                    break
    else:
        raise LmcError(
            f"{path}: unknown weight file type {path.suffix or '(none)'!r}; use .safetensors "
            f"or {'/'.join(TORCH_SUFFIXES)}"
        )
    if not isinstance(state, Mapping):
        raise LmcError(f"{path} holds a {type(state).__name__}, not a state dict")
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise LmcError(
                f"{path}: entry {key!r} is a {type(value).__name__}, not a tensor (give a "
                f"state dict, or a dict holding one under {', '.join(STATE_KEYS)})"
            )
    return dict(state)


def _weights_target(model: nn.Module) -> nn.Module:
    return model.hf if isinstance(model, HFLogits) else model


def load_weights(
    model: nn.Module, path: str | os.PathLike, *, source: str = "the model"
) -> nn.Module:
    """Load the weights in ``path`` (see :func:`read_weights`) into ``model``, strictly, and
    return it in eval mode.

    ``source`` names the model in errors (e.g. ``"the model from model.py:make"``). A tensor
    the model has and the file lacks, one the file has and the model lacks, a shape that
    differs or a non-finite value is a one-line ``LmcError`` naming the first such tensor and
    its shapes. Tied tensors (one parameter under two names, e.g. GPT-2's ``lm_head.weight``
    and ``transformer.wte.weight``) may be stored once, as ``save_pretrained`` does.
    """
    state = read_weights(path)
    target = _weights_target(model)
    expected = target.state_dict()
    for key, value in expected.items():
        if not isinstance(value, torch.Tensor):
            raise LmcError(
                f"{source} has state {key!r} that is a {type(value).__name__}, not a tensor (a "
                "module's extra state): a weight file holds tensors only, so lmc cannot load it"
            )
    _fill_tied(expected, state)
    for key, tensor in expected.items():
        if key not in state:
            raise LmcError(
                f"{path} does not fit {source}: it lacks tensor {key!r} of shape {_shape(tensor)}"
            )
        if tuple(state[key].shape) != tuple(tensor.shape):
            raise LmcError(
                f"{path} does not fit {source}: tensor {key!r} has shape {_shape(state[key])} "
                f"in the file but {_shape(tensor)} in the model"
            )
    for key, tensor in state.items():
        if key not in expected:
            raise LmcError(
                f"{path} does not fit {source}: it has tensor {key!r} of shape "
                f"{_shape(tensor)} that the model does not have"
            )
    check_finite(str(path), state)
    try:
        target.load_state_dict(state, strict=True)
    except (RuntimeError, ValueError) as exc:
        raise LmcError(f"{path} does not fit {source}: {_first_line(exc)}") from exc
    return model.eval()


def _fill_tied(expected: Mapping[str, torch.Tensor], state: dict[str, torch.Tensor]) -> None:
    """Give each name the file lacks the tensor of a name it shares its storage with."""
    by_storage: dict[int, list[str]] = {}
    for key, tensor in expected.items():
        if tensor.numel():
            by_storage.setdefault(tensor.data_ptr(), []).append(key)
    for keys in by_storage.values():
        present = [k for k in keys if k in state]
        for key in keys:
            if key not in state and present:
                state[key] = state[present[0]]


def export_state(model: nn.Module, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` (a state dict of ``model``) with the names a weight file of it uses, which
    :func:`load_weights` reads back: an :class:`HFLogits` model's drop the ``hf.`` prefix."""
    if isinstance(model, HFLogits):
        return {k.removeprefix("hf."): v for k, v in state.items()}
    return dict(state)
