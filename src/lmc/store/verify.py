"""Checking a whole run folder, as a file-system check would: every byte against the manifest.

:func:`verify_run` reports one run as
- ``ok``: every file the manifest lists has its size and SHA-256, and the config hashes to
  the folder's name;
- ``damaged``: something does not (``problems`` says which file, one line each), or a store
  run's config names no model (``None-…``, an older lmc's canonical-form curve): unloadable;
- ``unverified``: a finished run written before lmc kept manifests; its weights still parse;
- ``unfinished``: training has not finished (``lmc train`` resumes or retrains it).
Nothing is written; the stat cache is neither read nor updated.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmc.config import LmcError

from .atomic import load_tensors
from .manifest import MANIFEST_FILE, DamagedRunError, read_manifest, verify_files
from .runs import CONFIG_FILE, METRICS_FILE, MODEL_FILE, check_config_name, is_finished

#: What :func:`verify_run` reports of a run (the module docstring says when each applies).
STATUSES = ("ok", "damaged", "unverified", "unfinished")
_RUN_FILES = (CONFIG_FILE, MODEL_FILE, METRICS_FILE, MANIFEST_FILE)


@dataclass
class RunCheck:
    """The verdict on one run folder (``status`` one of :data:`STATUSES`)."""

    path: Path
    status: str
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"run": str(self.path), "status": self.status, "problems": list(self.problems)}


def run_folders(root: str | os.PathLike) -> list[Path]:
    """The folders of the store ``root`` that hold any run file, sorted (temporary folders,
    named ``.…``, and unrelated folders are left out)."""
    root = Path(root)
    if not root.is_dir():
        raise LmcError(f"the run store {root} is not a folder")
    return sorted(
        p
        for p in root.iterdir()
        if not p.name.startswith(".")
        and p.is_dir()
        and any(os.path.lexists(p / n) for n in _RUN_FILES)
    )


def verify_run(run_dir: str | os.PathLike) -> RunCheck:
    """Check every file of ``run_dir`` (see the module docstring); never raises for damage."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return RunCheck(run_dir, "damaged", [f"{run_dir} is not a run folder"])
    problems = _config_problems(run_dir)
    if not is_finished(run_dir):  # training, or being rewritten: lmc train takes it from here
        return RunCheck(run_dir, "damaged" if problems else "unfinished", problems)
    try:
        manifest = read_manifest(run_dir)
    except DamagedRunError as exc:
        return RunCheck(run_dir, "damaged", [str(exc), *problems])
    if manifest is None:
        problems += _unverified_problems(run_dir)
        return RunCheck(run_dir, "damaged" if problems else "unverified", problems)
    problems = [str(p) for p in verify_files(run_dir, manifest, use_cache=False)] + problems
    return RunCheck(run_dir, "damaged" if problems else "ok", problems)


def _config_problems(run_dir: Path) -> list[str]:
    from .atomic import read_json

    path = run_dir / CONFIG_FILE
    if not os.path.lexists(path):
        return [f"{path} is missing: not a run folder"]
    try:
        config = read_json(path, "run config")
        if not isinstance(config, dict):
            raise LmcError(f"{path} is not a JSON object")
        check_config_name(run_dir, config)
    except LmcError as exc:
        return [str(exc)]
    if config.get("model") is None and run_dir.name.startswith("None-"):
        # a store run named by a config without a model (an older lmc's curve fitted in the
        # canonical form): every file may be whole, yet it cannot be loaded as a model
        return [
            f"{path} names no model (model is null): the run cannot be loaded; delete it and "
            "make it again (lmc curve stores a canonical-form control point now)"
        ]
    return []


def _unverified_problems(run_dir: Path) -> list[str]:
    """A run without a manifest: what can still be checked (metrics ask for a manifest; the
    weights parse as safetensors)."""
    from .atomic import read_json

    try:
        if read_json(run_dir / METRICS_FILE).get("manifest"):
            return [f"{run_dir / MANIFEST_FILE} is damaged: missing (metrics.json names it)"]
        load_tensors(run_dir / MODEL_FILE)
    except LmcError as exc:
        return [str(exc)]
    return []
