"""Per-epoch checkpoints (model + optimizer state) in safetensors + JSON, for resuming."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from lmc.config import LmcError
from lmc.store import load_tensors, read_json, save_tensors, write_json

CHECKPOINT_TENSORS = "checkpoint.safetensors"
CHECKPOINT_META = "checkpoint.json"


def _flatten_optimizer(state: dict) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for idx, entry in state["state"].items():
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optim.{idx}.{key}"] = value
            else:
                scalars.setdefault(str(idx), {})[key] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def _unflatten_optimizer(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> dict:
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        if name.startswith("optim."):
            _, idx, key = name.split(".", 2)
            state.setdefault(int(idx), {})[key] = value
    for idx, entries in meta.get("scalars", {}).items():
        state.setdefault(int(idx), {}).update(entries)
    return {"state": state, "param_groups": meta["param_groups"]}


def save_checkpoint(
    run_dir: Path,
    epoch: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    history: list[dict],
) -> None:
    """Save the state after ``epoch`` epochs. Tensors first, then the JSON that points to them."""
    optim_tensors, optim_meta = _flatten_optimizer(optimizer.state_dict())
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    tensors.update(optim_tensors)
    save_tensors(run_dir / CHECKPOINT_TENSORS, tensors, metadata={"epoch": str(epoch)})
    write_json(
        run_dir / CHECKPOINT_META, {"epoch": epoch, "optimizer": optim_meta, "history": history}
    )


def load_checkpoint(run_dir: Path) -> dict[str, Any] | None:
    """The last checkpoint in ``run_dir`` as {epoch, model_state, optimizer_state, history}."""
    meta_path, tensor_path = run_dir / CHECKPOINT_META, run_dir / CHECKPOINT_TENSORS
    if not meta_path.exists() or not tensor_path.exists():
        return None
    meta = read_json(meta_path)
    tensors = load_tensors(tensor_path)
    from safetensors import safe_open

    with safe_open(str(tensor_path), "pt") as handle:
        saved_epoch = int((handle.metadata() or {}).get("epoch", -1))
    if saved_epoch != meta.get("epoch"):
        raise LmcError(f"{run_dir}: checkpoint files disagree on the epoch; delete them and re-run")
    model_state = {k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")}
    return {
        "epoch": meta["epoch"],
        "model_state": model_state,
        "optimizer_state": _unflatten_optimizer(tensors, meta["optimizer"]),
        "history": meta["history"],
    }


def remove_checkpoint(run_dir: Path) -> None:
    for name in (CHECKPOINT_META, CHECKPOINT_TENSORS):
        (run_dir / name).unlink(missing_ok=True)


__all__ = ["load_checkpoint", "remove_checkpoint", "save_checkpoint"]
