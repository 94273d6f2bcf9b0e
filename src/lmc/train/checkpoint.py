"""Per-epoch checkpoints (model + optimizer state) for resuming: one file, one atomic unit.

``checkpoint.safetensors`` holds the model's state (``model.<name>``) and the optimizer's
tensors (``optim.<param index>.<key>``); its metadata carries the rest as JSON
(``lmc_checkpoint``: epoch, optimizer param groups and scalars, history) and a SHA-256
(``lmc_sha256``) over that JSON and every tensor's name, dtype, shape and bytes. The file is
written beside its place and renamed over it, so a kill leaves the old checkpoint or the new
one, never a mix.

Loading checks the digest (resume is a reuse of stored state). A checkpoint that is cut short,
bit-flipped, written for another number of epochs, or the two-file pair of older versions
(``checkpoint.safetensors`` + ``checkpoint.json``) disagreeing on the epoch is ignored with an
:class:`~lmc.config.LmcWarning`: training starts again from scratch, which ends bit-identical
(on CPU). A consistent old pair is still resumed from. Something other than a regular file
in a checkpoint's place (a FIFO, a folder) is an ``LmcError``: lmc never waits on it.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load
from torch import nn

from lmc.config import LmcError, LmcWarning, check_regular_file, read_regular_bytes
from lmc.store import read_json, save_tensors, tensors_digest

CHECKPOINT_TENSORS = "checkpoint.safetensors"
CHECKPOINT_META = "checkpoint.json"  # only in checkpoints of older versions
_META_KEY, _DIGEST_KEY = "lmc_checkpoint", "lmc_sha256"


def flatten_optimizer(state: dict) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """An optimizer's ``state_dict()`` as tensors named ``optim.<index>.<key>`` (safetensors)
    and the rest as JSON-ready metadata: ``{"param_groups", "scalars"}``."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for idx, entry in state["state"].items():
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optim.{idx}.{key}"] = value
            else:
                scalars.setdefault(str(idx), {})[key] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def unflatten_optimizer(tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any]) -> dict:
    """The optimizer ``state_dict`` that :func:`flatten_optimizer` wrote (other tensors in
    ``tensors`` are passed over)."""
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        if name.startswith("optim."):
            _, idx, key = name.split(".", 2)
            state.setdefault(int(idx), {})[key] = value
    for idx, entries in meta.get("scalars", {}).items():
        state.setdefault(int(idx), {}).update(entries)
    return {"state": state, "param_groups": meta["param_groups"]}


def _digest(meta_json: str, tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 over the metadata JSON and each tensor's name, dtype, shape and bytes."""
    return tensors_digest(tensors, meta_json)


def save_checkpoint(
    run_dir: Path,
    epoch: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    history: list[dict],
) -> None:
    """Save the state after ``epoch`` epochs as one file, atomically (see the module doc)."""
    optim_tensors, optim_meta = flatten_optimizer(optimizer.state_dict())
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    tensors.update(optim_tensors)
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}
    meta_json = json.dumps(
        {"epoch": epoch, "optimizer": optim_meta, "history": history}, sort_keys=True
    )
    metadata = {"epoch": str(epoch), _META_KEY: meta_json, _DIGEST_KEY: _digest(meta_json, tensors)}
    save_tensors(run_dir / CHECKPOINT_TENSORS, tensors, metadata=metadata)
    (run_dir / CHECKPOINT_META).unlink(missing_ok=True)  # an older version's half


def load_checkpoint(run_dir: Path, *, epochs: int | None = None) -> dict[str, Any] | None:
    """The last checkpoint in ``run_dir`` as {epoch, model_state, optimizer_state, history},
    or ``None`` (none, or one not to trust: warned about). ``epochs``: the run's total, to
    refuse a checkpoint from beyond it."""
    path = Path(run_dir) / CHECKPOINT_TENSORS
    if not os.path.lexists(path):
        return None
    check_regular_file(path, "checkpoint")
    try:
        checkpoint = _read(Path(run_dir))
        if epochs is not None and not 0 <= checkpoint["epoch"] <= epochs:
            raise _Unusable(f"it is from epoch {checkpoint['epoch']} of a {epochs}-epoch run")
    except _Unusable as exc:
        warnings.warn(
            f"ignoring the checkpoint {path}: {exc}; training this run from scratch",
            LmcWarning,
            stacklevel=2,
        )
        return None
    return checkpoint


class _Unusable(Exception):
    """Why a checkpoint is not resumed from."""


def _read(run_dir: Path) -> dict[str, Any]:
    path = run_dir / CHECKPOINT_TENSORS
    data = read_regular_bytes(path, "checkpoint")
    try:
        tensors = load(data)
        header_len = int.from_bytes(data[:8], "little")
        metadata = json.loads(data[8 : 8 + header_len]).get("__metadata__") or {}
    except (SafetensorError, ValueError, RuntimeError, OSError) as exc:
        raise _Unusable(f"it is cut short or corrupt ({exc})") from exc
    if _META_KEY in metadata:
        meta_json = metadata[_META_KEY]
        if _digest(meta_json, tensors) != metadata.get(_DIGEST_KEY):
            raise _Unusable("its SHA-256 does not match its contents (damaged)")
        meta = json.loads(meta_json)
    else:
        meta = _legacy_meta(run_dir, metadata)
    model_state = {k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")}
    try:
        return {
            "epoch": int(meta["epoch"]),
            "model_state": model_state,
            "optimizer_state": unflatten_optimizer(tensors, meta["optimizer"]),
            "history": list(meta["history"]),
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise _Unusable(f"its metadata lacks {exc}") from exc


def _legacy_meta(run_dir: Path, metadata: dict[str, str]) -> dict[str, Any]:
    """The metadata of an older version's two-file checkpoint, if its two halves agree."""
    meta_path = run_dir / CHECKPOINT_META
    if not os.path.lexists(meta_path):
        raise _Unusable(f"it has no metadata and {CHECKPOINT_META} is missing")
    check_regular_file(meta_path, "checkpoint")
    try:
        meta = read_json(meta_path, "checkpoint")
    except LmcError as exc:
        raise _Unusable(str(exc)) from exc
    if not isinstance(meta, dict) or str(meta.get("epoch")) != metadata.get("epoch"):
        raise _Unusable(
            f"{CHECKPOINT_TENSORS} (epoch {metadata.get('epoch')}) and {CHECKPOINT_META} "
            f"(epoch {meta.get('epoch') if isinstance(meta, dict) else '?'}) disagree"
        )
    return meta


def remove_checkpoint(run_dir: Path) -> None:
    for name in (CHECKPOINT_META, CHECKPOINT_TENSORS):
        (run_dir / name).unlink(missing_ok=True)


__all__ = ["load_checkpoint", "remove_checkpoint", "save_checkpoint"]
