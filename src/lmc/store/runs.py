"""The run store: one folder per run, named by a hash of its canonical config.

A run folder holds
- ``config.json``: the canonical config (what determines the weights) and nothing else;
- ``model.safetensors``: the final state dict (parameters and buffers);
- ``metrics.json``: per-epoch history, final metrics, versions, device and wall time;
- ``manifest.json``: the size and SHA-256 of each of those files (:mod:`lmc.store.manifest`);
- while training, ``checkpoint.safetensors`` for resuming.

A run is finished when ``model.safetensors`` and ``metrics.json`` exist and the metrics say
``"status": "finished"``. Every write is atomic; the files are written in the order above, so
the manifest, last, vouches for whole files only.

Integrity, what is checked when:
- :func:`load_run` (every load): the config parses and hashes to its folder's name; every file
  the manifest lists is a regular file of its recorded size; ``config.json`` and
  ``metrics.json`` are hashed (they are read anyway, and small);
- :meth:`Run.state_dict` / :meth:`Run.build_model`: the weights' SHA-256, hashed over the bytes
  read for loading (skipped for a file the stat cache vouches for, see
  :mod:`lmc.store.manifest`);
- ``load_run(path, verify=True)`` and :meth:`RunStore.find` (reuse): every listed file's
  SHA-256, at once;
- ``lmc verify``: every byte of every run, no cache.
A mismatch is a :class:`DamagedRunError` (an ``LmcError``), one line naming the file. A
finished run without a manifest (written before lmc kept one) loads with one
:class:`~lmc.config.LmcWarning`: unverified, never damaged.

Leftovers of a kill: a run folder is written whole under a temporary name beside its place
(``.<run>.lmc-<host>-<pid>.<random>.tmp``) and renamed in (:func:`lmc.store.output_dir`), so a
``kill -9`` mid-write can leave that temporary folder. :meth:`RunStore.tidy` removes the ones
whose writing process is gone (never a live worker's), and the store tidies itself before it
writes (:meth:`RunStore.check_writable`) and on a look-up (:meth:`RunStore.find`) when its
folder changed since it last did, so a re-run leaves the store as an uninterrupted run would.
"""

from __future__ import annotations

import json
import os
import re
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from torch import nn

from lmc.config import LmcError, LmcWarning, check_regular_file, config_hash
from lmc.config.validate import nonfinite_count
from lmc.data.loaders import ALL_DATASETS, dataset_task
from lmc.data.tasks import CLASSIFICATION

from .atomic import (
    check_output_place,
    load_regular_tensors,
    output_dir,
    read_json,
    remove_stale,
    save_tensors,
    tensors_from_bytes,
    write_json,
)
from .manifest import (
    CACHE_FILE,
    MANIFEST_FILE,
    DamagedRunError,
    check_sizes,
    read_checked,
    read_manifest,
    verify_files,
    write_manifest,
)

#: A run's canonical config, whose hash names the run's folder.
CONFIG_FILE = "config.json"
#: A run's final weights (safetensors).
MODEL_FILE = "model.safetensors"
#: A finished run's metrics (with ``"status": "finished"``), written when training ends.
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
    """A finished (or loaded) run: its folder, config, metrics and manifest (``None`` for a
    run written before lmc kept manifests: its files cannot be checked)."""

    path: Path
    config: dict[str, Any]
    metrics: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, dict[str, Any]] | None = None

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def task(self) -> str:
        """The name of the task (:mod:`lmc.data.tasks`) the run's model serves, what its
        evaluation asks: the one its ``metrics.json`` records (``"task"``, written by
        :func:`lmc.train.runs.final_metrics`; never part of the hashed config, so run names do
        not depend on it), else its config's ``task`` (a stored curve's), else, for a run made
        before runs recorded it, its dataset's declaration (:func:`lmc.data.loaders.
        dataset_task`), else ``classification``."""
        for recorded in (self.metrics.get("task"), self.config.get("task")):
            if isinstance(recorded, str):
                return recorded
        dataset = self.config.get("dataset")
        if dataset in ALL_DATASETS:
            return dataset_task(dataset)
        return CLASSIFICATION.name

    @property
    def verified(self) -> bool:
        """Whether the run has a manifest to check its files against."""
        return self.manifest is not None

    def state_dict(self, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
        """The stored final state dict, loaded without unpickling; its size and SHA-256 are
        checked against the manifest over the bytes read (:class:`DamagedRunError`), and every
        floating tensor must be finite (:func:`check_finite_weights`: a NaN or inf is an
        ``LmcError`` naming the tensor, never evaluated)."""
        path = self.path / MODEL_FILE
        data = read_checked(self.path, MODEL_FILE, self.manifest, "model file", vouched_ok=True)
        if data is None:  # vouched for by the stat cache: loaded straight from the file
            state = load_regular_tensors(path, device=device)
        else:
            state = tensors_from_bytes(data, path, device)
        check_finite_weights(state, path)
        return state

    def verify(self) -> None:
        """Hash every file the manifest lists now; the first mismatch is raised. A run without
        a manifest gets what can be checked without one: its weights' safetensors header must
        cover the file exactly (a file cut short fails)."""
        if self.manifest is not None:
            problems = verify_files(self.path, self.manifest)
            if problems:
                raise problems[0]
            return
        path = self.path / MODEL_FILE
        check_regular_file(path, "model file")
        try:
            with safe_open(str(path), "pt"):
                pass
        except (SafetensorError, OSError) as exc:
            raise DamagedRunError(path, f"not a whole safetensors file ({exc})") from exc

    def build_model(self, device: str | torch.device = "cpu") -> nn.Module:
        """The architecture from the config with the stored weights loaded, in eval mode.

        A canonical-form run (config ``"form": "canonical"``: a merge beyond permutations, a
        curve fitted in the canonical form) is the canonical form of the config's model
        (:func:`lmc.merge.many.build_run_model`; built by the form's registered builder,
        :data:`RUN_FORMS`). A config that names no zoo model (``model``
        null) is a one-line ``LmcError``."""
        from lmc.models import build

        model_name, options = self.config.get("model"), self.config.get("model_options")
        if model_name is None or not isinstance(options, dict):
            raise LmcError(
                f"{self.path} names no zoo model in its config (model is null): it cannot be "
                "loaded as a model; if it is a curve's control point stored by an older lmc, "
                "delete it and fit the curve again"
            )
        architecture = build(model_name, **options)
        state = self.state_dict(device="cpu")
        form = self.config.get("form")
        if form is not None:
            if form not in RUN_FORMS:
                raise LmcError(
                    f"{self.path} is stored in the {form} form, which nothing in this process "
                    "has registered: import lmc.merge first (or load it with "
                    "lmc.merge.many.build_run_model)"
                )
            return RUN_FORMS[form](architecture, state).to(device).eval()
        try:
            architecture.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            raise LmcError(_misfit_message(self.path, architecture, state, exc)) from exc
        return architecture.to(device).eval()


def _misfit_message(
    path: Path, architecture: nn.Module, state: dict[str, torch.Tensor], exc: RuntimeError
) -> str:
    """One line saying why ``state`` does not load into ``architecture``: weights of the
    model's canonical form under a config without ``"form": "canonical"`` (an older lmc's curve
    between canonical-form runs) are said so; otherwise torch's reasons, joined into one line."""
    try:
        if "canonical" not in RUN_FORMS:
            raise LookupError("the canonical form is not registered")
        RUN_FORMS["canonical"](architecture, state)
    except Exception:  # noqa: BLE001 - not the canonical form either: torch's reasons below
        reasons = (
            " ".join(line.strip() for line in str(exc).splitlines()[1:] if line.strip())
            or str(exc).strip()
        )
        if len(reasons) > 300:
            reasons = reasons[:297] + "..."
        return (
            f"{path / MODEL_FILE} does not fit its config (model {architecture.__class__.__name__}"
            f"): {reasons}"
        )
    return (
        f"{path / MODEL_FILE} holds the weights of its model's canonical form, but its config "
        'lacks "form": "canonical" (stored by an older lmc): delete the run and make it again'
    )


#: How a run stored in another form than its config's architecture is built: form name ->
#: ``builder(architecture, state) -> nn.Module`` (:func:`register_run_form`). ``lmc.merge``
#: registers ``canonical`` (merges beyond permutations, curves fitted in the canonical form), so
#: the store, which comes before it in the pipeline, never imports it.
RUN_FORMS: dict[str, Any] = {}


def register_run_form(form: str, builder: Any) -> None:
    """Make runs whose config says ``"form": form`` load through ``builder(architecture,
    state)`` (the config's zoo model with fresh weights, the stored state) in
    :meth:`Run.build_model`."""
    RUN_FORMS[form] = builder


class RunStore:
    """A folder of runs. ``RunStore(root).path_for(config)`` is where that config's run lives."""

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = Path(root) if root is not None else default_runs_dir()

    def check_writable(self) -> Path:
        """Refuse at once a store that cannot be written (a file, a dangling link, read-only,
        a full disk): an ``LmcError`` naming it. Verbs that add runs call it before working.
        Then tidies the store (:meth:`tidy`)."""
        root = check_output_place(self.root, "run store")
        self.tidy()
        return root

    def tidy(self) -> list[Path]:
        """Remove what killed writers left in the store: temporary run folders (and the
        earlier folders set aside while a new one was renamed in, put back when their run's
        folder is missing) whose writing process on this machine is gone
        (:func:`lmc.store.atomic.remove_stale`). A live process's, another machine's or an
        older lmc's entries stay. Returns the entries tidied; a missing store is nothing."""
        if not self.root.is_dir():
            return []
        tidied = remove_stale(self.root)
        try:
            _TIDIED[str(self.root.absolute())] = self.root.stat().st_mtime_ns
        except OSError:
            pass
        return tidied

    def _tidy_if_changed(self) -> None:
        """:meth:`tidy` unless the store's folder is unchanged (no entry added or removed)
        since this process last tidied it: a look-up costs one ``stat``."""
        try:
            mtime = self.root.stat().st_mtime_ns
        except OSError:
            return
        if _TIDIED.get(str(self.root.absolute())) != mtime:
            self.tidy()

    def path_for(self, config: dict[str, Any]) -> Path:
        return self.root / run_name(config)

    def is_finished(self, config: dict[str, Any]) -> bool:
        """Whether a finished run for ``config`` exists and is whole (a damaged one is not
        finished: it is to be trained again)."""
        try:
            return self.find(config) is not None
        except DamagedRunError:
            return False

    def find(self, config: dict[str, Any], *, verify: bool = True) -> Run | None:
        """The finished run for ``config`` to reuse, or ``None``. With ``verify`` (the default)
        every file is checked against the manifest first: a damaged run raises
        :class:`DamagedRunError` naming the file (see :meth:`reopen`)."""
        self._tidy_if_changed()  # a re-run tidies what a killed one left
        path = self.path_for(config)
        if not is_finished(path):
            return None
        remove_stale(path)  # a temporary file a killed writer left in the run folder
        return load_run(path, verify=verify)

    def find_or_reopen(self, config: dict[str, Any], action: str = "making") -> Run | None:
        """:meth:`find`, except that a damaged run is said so on stderr (one line naming the
        file, ending "``action`` the run again") and reopened (:meth:`reopen`), so the caller
        makes it afresh: returns ``None`` then, as for a run never made."""
        try:
            return self.find(config)
        except DamagedRunError as exc:
            print(f"lmc: {exc}; {action} the run again", file=sys.stderr, flush=True)
            self.reopen(config)
            return None

    def reopen(self, config: dict[str, Any]) -> Path:
        """Mark the run for ``config`` unfinished so it is written again: its finishing mark
        (``metrics.json``) goes first, then its manifest, stat cache and weights. The config
        and any checkpoint stay. Returns the run folder."""
        path = self.path_for(config)
        for name in (METRICS_FILE, MANIFEST_FILE, CACHE_FILE, MODEL_FILE):
            (path / name).unlink(missing_ok=True)
        return path

    def save(
        self,
        config: dict[str, Any],
        state_dict: dict[str, torch.Tensor],
        metrics: dict[str, Any],
        extra_tensors: dict[str, dict[str, torch.Tensor]] | None = None,
        extra_json: dict[str, Any] | None = None,
    ) -> Run:
        """Write a finished run: config, weights, metrics (the finishing mark), and last the
        manifest of their sizes and SHA-256 (hashed from the bytes written).

        ``extra_tensors`` maps further file names in the run folder to tensors (e.g. a
        permutation saved beside an aligned model), ``extra_json`` further JSON files (a
        summary); both are in the manifest. The folder is written whole beside its
        place and renamed into it (:func:`lmc.store.output_dir`): it replaces what was there
        (an unfinished run's config and checkpoint) as one unit, and a failure (a full disk)
        leaves the folder as it was.
        """
        path = self.path_for(config)
        metrics = {**metrics, "status": "finished", "manifest": MANIFEST_FILE}
        with output_dir(path, replaces=(CONFIG_FILE, METRICS_FILE, MANIFEST_FILE)) as tmp:
            records = {CONFIG_FILE: write_json(tmp / CONFIG_FILE, config)}
            records[MODEL_FILE] = save_tensors(tmp / MODEL_FILE, state_dict)
            for filename, tensors in (extra_tensors or {}).items():
                records[filename] = save_tensors(tmp / filename, tensors)
            for filename, obj in (extra_json or {}).items():
                records[filename] = write_json(tmp / filename, obj)
            records[METRICS_FILE] = write_json(tmp / METRICS_FILE, metrics)
            write_manifest(tmp, records)
        return Run(path, config, metrics, read_manifest(path))


def check_finite_weights(state: dict[str, torch.Tensor], source: str | os.PathLike) -> None:
    """``LmcError`` naming the first tensor of ``state`` (read from ``source``) that holds a NaN
    or an infinity, with how many of its values do: weights that are not finite give no loss or
    barrier worth reporting (NaN everywhere on the path), so they are refused where a run is
    loaded, not measured. Integer tensors (counters) are not checked."""
    for key, tensor in state.items():
        if not (tensor.is_floating_point() or tensor.is_complex()):
            continue
        bad = nonfinite_count(tensor)
        if bad:
            raise LmcError(
                f"{source}: tensor {key!r} holds {bad} non-finite value{'s' if bad > 1 else ''} "
                f"(NaN or inf) of {tensor.numel()}; weights that are not finite cannot be "
                "evaluated: train the run again (or give other weights)"
            )


def is_finished(run_dir: str | os.PathLike) -> bool:
    """Whether ``run_dir`` holds weights and metrics that say ``"finished"`` (nothing hashed;
    whether the files are whole is :func:`load_run`'s question)."""
    run_dir = Path(run_dir)
    if not (run_dir / MODEL_FILE).exists() or not (run_dir / METRICS_FILE).exists():
        return False
    try:
        return read_json(run_dir / METRICS_FILE).get("status") == "finished"
    except (LmcError, AttributeError):
        return False


_HASHED_NAME = re.compile(r".+-([0-9a-f]{12})")
_TIDIED: dict[str, int] = {}  # store -> its folder's mtime (ns) when this process tidied it
_WARNED_UNVERIFIED: set[str] = set()


def check_config_name(run_dir: Path, config: dict[str, Any]) -> None:
    """A folder named ``…-<12 hex digits>`` must hold the config with that hash; a folder
    renamed by hand (no hash at its end) is not checked."""
    match = _HASHED_NAME.fullmatch(run_dir.name)
    if match is None:
        return
    try:
        digest = config_hash(config)
    except (TypeError, ValueError):
        digest = "not hashable (non-finite numbers)"
    if digest != match.group(1):
        raise DamagedRunError(
            run_dir / CONFIG_FILE,
            f"it hashes to {digest}, but its folder is named for {match.group(1)}: the config "
            "was changed after the run was written; restore it or delete the run folder",
        )


def _read_json_checked(run_dir: Path, name: str, manifest: dict | None, what: str) -> Any:
    data = read_checked(run_dir, name, manifest, what)
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise LmcError(f"{run_dir / name} is not valid JSON ({exc}); delete it and re-run") from exc


def load_run(run_dir: str | os.PathLike, *, verify: bool = False) -> Run:
    """Load a run folder (config and metrics; weights on demand). Clear errors if it is not one.

    Checks the config against the folder's name and every file against the manifest: sizes
    always, SHA-256 of all files with ``verify`` (as reuse does), else of the weights when
    they are read. A mismatch is a :class:`DamagedRunError` naming the file.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise LmcError(f"{run_dir} is not a run folder (it does not exist)")
    if not os.path.lexists(run_dir / CONFIG_FILE):
        raise LmcError(f"{run_dir} is not a run folder: it has no {CONFIG_FILE}")
    manifest = read_manifest(run_dir)
    config = _read_json_checked(run_dir, CONFIG_FILE, manifest, "run config")
    if not isinstance(config, dict):
        raise LmcError(f"{run_dir / CONFIG_FILE} is not a JSON object: not an lmc run")
    for key in ("model", "model_options"):
        if key not in config:
            raise LmcError(f"{run_dir / CONFIG_FILE} lacks {key!r}: not an lmc run")
    check_config_name(run_dir, config)
    if not os.path.lexists(run_dir / MODEL_FILE):
        raise LmcError(f"{run_dir} has no {MODEL_FILE}: the run did not finish; train it again")
    metrics = {}
    if os.path.lexists(run_dir / METRICS_FILE):
        metrics = _read_json_checked(run_dir, METRICS_FILE, manifest, "run metrics")
        if not isinstance(metrics, dict):
            raise LmcError(f"{run_dir / METRICS_FILE} is not a JSON object: not an lmc run")
    if manifest is None:
        if metrics.get("manifest"):
            raise DamagedRunError(
                run_dir / MANIFEST_FILE,
                "missing (its metrics.json says one was written); re-run the command that "
                "made the run (lmc train with the same flags retrains it) or delete the folder",
            )
        if metrics.get("status") == "finished" and str(run_dir) not in _WARNED_UNVERIFIED:
            _WARNED_UNVERIFIED.add(str(run_dir))
            warnings.warn(
                f"{run_dir} has no {MANIFEST_FILE} (written before lmc kept one): its files "
                "cannot be checked; using it unverified",
                LmcWarning,
                stacklevel=2,
            )
    elif not verify:  # verifying checks the sizes too
        check_sizes(run_dir, manifest)
    run = Run(run_dir, config, metrics, manifest)
    if verify and manifest is not None:  # config and metrics were hashed as they were read
        problems = verify_files(run_dir, manifest, skip=(CONFIG_FILE, METRICS_FILE))
        if problems:
            raise problems[0]
    elif verify:
        run.verify()
    return run
