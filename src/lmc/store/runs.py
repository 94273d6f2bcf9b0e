"""The run store: one folder per run, named by a hash of its canonical config.

A run folder holds
- ``config.json``: the canonical config (what determines the weights) and nothing else;
- ``model.safetensors``: the final state dict (parameters and buffers);
- ``metrics.json``: per-epoch history, final metrics, versions, device and wall time;
- while training, ``checkpoint.safetensors`` + ``checkpoint.json`` for resuming.

A run is finished when ``model.safetensors`` and ``metrics.json`` exist and the metrics say
``"status": "finished"``. Every write is atomic.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lmc.config import LmcError, config_hash

from .atomic import load_tensors, read_json, save_tensors, write_json

CONFIG_FILE = "config.json"
MODEL_FILE = "model.safetensors"
METRICS_FILE = "metrics.json"


def default_runs_dir() -> Path:
    """``$LMC_RUNS`` if set, else ``./runs``."""
    return Path(os.environ.get("LMC_RUNS", "runs"))


def run_name(config: dict[str, Any]) -> str:
    """Folder name of a run: ``<model>-<dataset>-<hash of the canonical config>``."""
    prefix = "-".join(str(config.get(k, "run")) for k in ("model", "dataset"))
    kind = config.get("kind", "train")
    if kind != "train":
        prefix = f"{prefix}-{kind}"
    return f"{prefix}-{config_hash(config)}"


@dataclass
class Run:
    """A finished (or loaded) run: its folder, config and metrics."""

    path: Path
    config: dict[str, Any]
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.name

    def state_dict(self, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
        """The stored final state dict, loaded without unpickling."""
        return load_tensors(self.path / MODEL_FILE, device=device)

    def build_model(self, device: str | torch.device = "cpu") -> nn.Module:
        """The architecture from the config with the stored weights loaded, in eval mode."""
        from lmc.models import build

        model = build(self.config["model"], **self.config["model_options"])
        state = self.state_dict(device="cpu")
        try:
            model.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            first = str(exc).splitlines()[0]
            raise LmcError(f"{self.path / MODEL_FILE} does not fit its config: {first}") from exc
        return model.to(device).eval()


class RunStore:
    """A folder of runs. ``RunStore(root).path_for(config)`` is where that config's run lives."""

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = Path(root) if root is not None else default_runs_dir()

    def path_for(self, config: dict[str, Any]) -> Path:
        return self.root / run_name(config)

    def is_finished(self, config: dict[str, Any]) -> bool:
        return is_finished(self.path_for(config))

    def find(self, config: dict[str, Any]) -> Run | None:
        """The finished run for ``config``, or ``None``."""
        path = self.path_for(config)
        return load_run(path) if is_finished(path) else None

    def save(
        self,
        config: dict[str, Any],
        state_dict: dict[str, torch.Tensor],
        metrics: dict[str, Any],
        extra_tensors: dict[str, dict[str, torch.Tensor]] | None = None,
    ) -> Run:
        """Write a finished run: config, weights, then metrics (the finishing mark) last.

        ``extra_tensors`` maps further file names in the run folder to tensors (e.g. a
        permutation saved beside an aligned model).
        """
        path = self.path_for(config)
        path.mkdir(parents=True, exist_ok=True)
        write_json(path / CONFIG_FILE, config)
        save_tensors(path / MODEL_FILE, state_dict)
        for filename, tensors in (extra_tensors or {}).items():
            save_tensors(path / filename, tensors)
        metrics = {**metrics, "status": "finished"}
        write_json(path / METRICS_FILE, metrics)
        return Run(path, config, metrics)


def is_finished(run_dir: str | os.PathLike) -> bool:
    run_dir = Path(run_dir)
    if not (run_dir / MODEL_FILE).exists() or not (run_dir / METRICS_FILE).exists():
        return False
    try:
        return read_json(run_dir / METRICS_FILE).get("status") == "finished"
    except LmcError:
        return False


def load_run(run_dir: str | os.PathLike) -> Run:
    """Load a run folder (config and metrics; weights on demand). Clear errors if it is not one."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise LmcError(f"{run_dir} is not a run folder (it does not exist)")
    if not (run_dir / CONFIG_FILE).exists():
        raise LmcError(f"{run_dir} is not a run folder: it has no {CONFIG_FILE}")
    config = read_json(run_dir / CONFIG_FILE)
    if not (run_dir / MODEL_FILE).exists():
        raise LmcError(f"{run_dir} has no {MODEL_FILE}: the run did not finish; train it again")
    metrics = read_json(run_dir / METRICS_FILE) if (run_dir / METRICS_FILE).exists() else {}
    for key in ("model", "model_options"):
        if key not in config:
            raise LmcError(f"{run_dir / CONFIG_FILE} lacks {key!r}: not an lmc run")
    return Run(run_dir, config, metrics)
