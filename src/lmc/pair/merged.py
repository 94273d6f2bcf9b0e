"""Merge N stored runs of one architecture into one model, stored as a run (``lmc merge``).

:func:`merge_runs` reads the alignment from the method registry (:mod:`lmc.perm.methods`):

- ``none``: the plain average of the weights;
- ``weight``: Git Re-Basin's merge-many (App. A.10, :func:`lmc.merge.merge_many_iterative`):
  round after round, every model in a seeded random order is permuted by weight matching onto
  the mean of the others, until a round changes no permutation (or ``max_rounds``);
- a method that aligns canonical forms (its record's ``canonical``: ``orthogonal``,
  ``learned``, ``orthogonal-activation``, ``canonical`` the control, pre-LN transformers):
  every model in its canonical form aligned onto the first run's, optionally ``rounds`` rounds
  onto the mean of the others (:func:`lmc.merge.many.merge_many_canonical`); the merge is a
  canonical-form run (config ``"form": "canonical"``, loaded by
  :func:`lmc.merge.many.build_run_model`), its alignments in ``alignments.safetensors`` and
  ``alignments.json``;
- any other registered method (``activation``, ``ste``, ``onepass``, ``random``, a plug-in):
  anchored, every model aligned onto the first run's by :func:`lmc.perm.align`, then averaged.

For a model with BatchNorm the merge's running statistics are recomputed on the training
split (``bn`` auto/reset; none keeps the averages). The merged model, every input and their
ensemble (the mean of the inputs' outputs) are evaluated on the test split with the runs' task
(loss, accuracy, ECE). The merged run (kind ``"merged"``) is the first run's config plus a
``"merge"`` record (the runs in order and every setting that changes the result); an identical
one is reused. A permutation of each input is saved as ``perms.safetensors`` (key
``"<i>.<group>"``: new unit j = old unit p[j] of input i).
"""

from __future__ import annotations

import copy
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lmc.config import LmcError, environment_info, resolve_device
from lmc.data import Dataset
from lmc.merge import average, merge_many_iterative, reset_batchnorm, resolve_bn_mode
from lmc.merge.many import CANONICAL_FORM, FORM_KEY, merge_many_canonical
from lmc.metrics import classification_metrics, model_logits
from lmc.models import check_same_architecture, eval_mode
from lmc.perm import align, identity_permutation
from lmc.perm.methods import CANONICAL_CONTROL, get_method, method_names
from lmc.store import Run, RunStore, check_output_place, output_dir, write_json
from lmc.train.runs import load_run_data

from .pipeline import alignment_examples

#: the two alignments merged by a scheme of their own (the others: canonical or anchored)
PLAIN, MERGE_MANY = "none", "weight"
BN = ("auto", "reset", "none")
PERMS_FILE = "perms.safetensors"
ALIGNMENTS_FILE = "alignments.safetensors"
ALIGNMENTS_JSON = "alignments.json"
SUMMARY_FILE = "merge.json"


@dataclass(frozen=True)
class MergedRun:
    """What :func:`merge_runs` made (or found): the merged run's folder ``path``, its
    ``record`` (the settings, the runs, what the alignment did, and the test metrics of the
    merge, the ensemble and every input) and whether an identical merge was ``reused``."""

    path: Path
    record: dict[str, Any]
    reused: bool


def merge_settings(
    align: str,
    *,
    given: Mapping[str, Any] | None = None,
    bn: str = "auto",
    seed: int = 0,
    max_rounds: int = 100,
    max_iter: int = 100,
    tol: float = 1e-4,
    rounds: int = 0,
    align_examples: int | None = 2000,
) -> dict[str, Any]:
    """The checked settings of a merge that enter its config (what changes the result):
    ``align`` (a registered method), ``bn``, and by alignment ``weight``: ``seed``,
    ``max_rounds``, ``max_iter``, ``tol``; a canonical method: ``seed`` (not for the control),
    ``rounds``, the method's ``settings`` (``given`` over its defaults, as its identity) and,
    where it reads data, ``align_examples`` (``None`` or 0: the whole training split); any
    other method: ``seed``, its ``settings`` and ``align_examples`` likewise."""
    choices = method_names()
    if align not in choices:
        raise LmcError(f"unknown --align {align!r}: choose one of {', '.join(choices)}")
    if bn not in BN:
        raise LmcError(f"unknown --bn {bn!r}: choose one of {', '.join(BN)}")
    for flag, value in (("--max-rounds", max_rounds), ("--max-iter", max_iter)):
        if value < 1:
            raise LmcError(f"{flag} must be at least 1, got {value}")
    if not (tol >= 0 and math.isfinite(tol)):
        raise LmcError(f"--tol must be a non-negative number, got {tol}")
    if align_examples is not None and align_examples < 0:
        raise LmcError(f"--align-examples must be 0 (all) or more, got {align_examples}")
    if rounds < 0:
        raise LmcError(f"--rounds must be at least 0, got {rounds}")
    settings: dict[str, Any] = {"align": align, "bn": bn}
    record = get_method(align)
    if align == MERGE_MANY:
        settings.update(seed=seed, max_rounds=max_rounds, max_iter=max_iter, tol=tol)
        return settings
    if align == PLAIN:
        return settings
    if not record.canonical and rounds:
        raise LmcError(
            f"--rounds re-aligns canonical forms; method {align!r} merges anchored on RUN 1: "
            "drop --rounds"
        )
    if align != CANONICAL_CONTROL:  # the control aligns nothing: no seed enters it
        settings["seed"] = seed
    if record.canonical:
        settings["rounds"] = rounds
    settings["settings"] = record.identity(record.resolve(given or {}))
    if record.needs_data:
        settings["align_examples"] = align_examples or None
    return settings


def check_runs(runs: Sequence[Run]) -> None:
    """One-line ``LmcError`` naming the first run whose data or architecture differs from
    the first run's (or when fewer than two runs are given)."""
    if len(runs) < 2:
        raise LmcError(f"merge needs at least two runs, got {len(runs)}")
    first = runs[0]
    for i, run in enumerate(runs[1:], start=2):
        for key in ("dataset", "dataset_options", "model", "model_options"):
            a, b = first.config.get(key), run.config.get(key)
            if a != b:
                what = "architecture" if key.startswith("model") else "dataset"
                raise LmcError(
                    f"the runs do not match: {key} is {a!r} in RUN 1 ({first.name}) but {b!r} "
                    f"in RUN {i} ({run.name}); merge needs runs of one {what}"
                )


@torch.no_grad()
def _logits(model: nn.Module, x: torch.Tensor, device: torch.device) -> torch.Tensor:
    with eval_mode(model):
        return model_logits(model, x, 1024, device)


def _metrics(logits: torch.Tensor, y: torch.Tensor, task: Any) -> dict[str, float]:
    return {f"test_{k}": v for k, v in classification_metrics(logits, y, task=task).items()}


def _alignment_files(alignments: Sequence[Any]) -> dict[str, dict]:
    tensors: dict[str, torch.Tensor] = {}
    described = []
    for i, alignment in enumerate(alignments):
        parts, meta = alignment.to_tensors()
        tensors.update({f"{i}.{key}": value for key, value in parts.items()})
        described.append(meta)
    return {"tensors": {ALIGNMENTS_FILE: tensors}, "json": {ALIGNMENTS_JSON: described}}


def _canonical_merge(settings, given, models, data, seed, quiet):
    """Merge beyond permutations: ``(merged model, info, extra files)``."""
    record = get_method(settings["align"])
    count = settings.get("align_examples") if record.needs_data else 2
    x, y = alignment_examples(data, count, seed)
    result = merge_many_canonical(
        models, settings["align"], inputs=x, labels=y if record.needs_labels else None,
        task=data.task, seed=seed, rounds=settings["rounds"], quiet=quiet,
        **record.resolve(given),
    )  # fmt: skip
    skip = ("kinds", "group_sizes", "method", "settings")
    info: dict[str, Any] = {
        "canonical": True,
        "alignments": [
            None if i is None else {k: v for k, v in i.items() if k not in skip}
            for i in result.infos
        ],
    }
    if settings["rounds"]:
        info["shifts"] = result.shifts
    return result.model, info, _alignment_files(result.alignments)


def _anchored_merge(settings, given, models, data, seed, quiet):
    """Every model aligned onto the first by the method, then averaged: ``(state, info, extra
    files)``."""
    method = settings["align"]
    record = get_method(method)
    count = settings.get("align_examples") if record.needs_data else 2
    x, y = alignment_examples(data, count, seed)
    states = [dict(models[0].state_dict())]
    results = []
    for model in models[1:]:
        result = align(
            method, models[0], model, inputs=x, labels=y if record.needs_labels else None,
            task=data.task, seed=seed, quiet=quiet, **record.resolve(given),
        )  # fmt: skip
        states.append(result.state_dict)
        results.append(result)
    keep = ("objective_before", "objective_after", "moved_fraction", "seconds")
    info = {
        "anchored": True,
        "alignments": [None, *({k: r.info.get(k) for k in keep} for r in results)],
    }
    if all(r.perm is not None for r in results):
        perms = [identity_permutation(results[0].spec), *(r.perm for r in results)]
        files = {f"{i}.{g}": p for i, perm in enumerate(perms) for g, p in perm.items()}
        return average(states), info, {"tensors": {PERMS_FILE: files}, "json": {}}
    from lmc.perm import Alignment

    alignments = [Alignment.identity(results[0].spec), *(r.alignment for r in results)]
    return average(states), info, _alignment_files(alignments)


def build_run_models(runs: Sequence[Run], device: str | torch.device = "cpu") -> list[nn.Module]:
    """The models of stored ``runs`` with their weights, in eval mode on ``device``
    (:func:`lmc.merge.many.build_run_model`: a canonical-form run in its canonical form). When
    some runs are canonical-form and others are not, the others are put in their canonical
    form too (:func:`lmc.perm.canonicalize`: the same function, other parameters), so that
    all are compared, aligned and merged in one form."""
    from lmc.merge.many import build_run_model

    models = [build_run_model(r, device) for r in runs]
    canonical = [r.config.get(FORM_KEY) == CANONICAL_FORM for r in runs]
    if any(canonical) and not all(canonical):
        from lmc.perm import canonicalize

        models = [m if c else canonicalize(m).eval() for m, c in zip(models, canonical)]
    return models


def _run(run: Run | str | os.PathLike) -> Run:
    from lmc.store import load_run

    return run if isinstance(run, Run) else load_run(run)


def merge_runs(
    runs: Sequence[Run | str | os.PathLike],
    align: str = "weight",
    *,
    given: Mapping[str, Any] | None = None,
    bn: str = "auto",
    seed: int = 0,
    max_rounds: int = 100,
    max_iter: int = 100,
    tol: float = 1e-4,
    rounds: int = 0,
    align_examples: int | None = 2000,
    runs_dir: str | os.PathLike | None = None,
    device: str | torch.device = "cpu",
    data_dir: str | os.PathLike | None = None,
    download: bool = False,
    summary_dir: str | os.PathLike | None = None,
    quiet: bool = True,
) -> MergedRun:
    """Merge ``runs`` (stored runs of one dataset and architecture, or their folders) with the
    alignment ``align`` (module docstring) and store the merge as a run, or reuse an identical
    one. ``given``: the alignment method's settings (checked by its record); the other
    keywords are :func:`merge_settings`' and where the runs live (``runs_dir``), compute
    (``device``) and read their data (``data_dir``, ``download``). ``summary_dir``: a folder
    that also gets ``merge.json`` (the record and the run folder)."""
    settings = merge_settings(
        align, given=given, bn=bn, seed=seed, max_rounds=max_rounds, max_iter=max_iter,
        tol=tol, rounds=rounds, align_examples=align_examples,
    )  # fmt: skip
    given = dict(given or {})
    runs = [_run(r) for r in runs]
    check_runs(runs)
    canonical = get_method(align).canonical
    # canonical-form inputs (earlier merges beyond permutations) are merged in that form
    in_form = canonical or any(r.config.get(FORM_KEY) == CANONICAL_FORM for r in runs)
    config = {
        **runs[0].config,
        "kind": "merged",
        **({FORM_KEY: CANONICAL_FORM} if in_form else {}),
        "merge": {**settings, "runs": [r.name for r in runs]},
    }
    store = RunStore(runs_dir)
    if summary_dir is not None:
        check_output_place(summary_dir)
    existing = store.find_or_reopen(config, "merging")
    if existing is None:
        store.check_writable()
    if existing is not None and "merge" in existing.metrics:
        return _finish(existing.metrics["merge"], existing.path, True, summary_dir)

    device = resolve_device(device)
    models = build_run_models(runs, device)
    for i, m in enumerate(models[1:], start=2):
        check_same_architecture(models[0], m, names=("RUN 1", f"RUN {i}"), purpose="merging")
    data = load_run_data(runs[0], data_dir=data_dir, device=device, download=download)
    start = time.perf_counter()
    info: dict[str, Any] = {}
    files: dict[str, dict] = {"tensors": {}, "json": {}}
    merged = None
    if canonical:
        merged, info, files = _canonical_merge(settings, given, models, data, seed, quiet)
    elif align == MERGE_MANY:
        result = merge_many_iterative(
            models, example_input=data.x_train[:2], seed=settings["seed"],
            max_rounds=settings["max_rounds"], max_iter=settings["max_iter"],
            tol=settings["tol"],
        )  # fmt: skip
        state = result.state
        info = {"rounds": result.rounds, "changes": result.changes, "converged": result.converged}
        perms = {f"{i}.{g}": p for i, perm in enumerate(result.perms) for g, p in perm.items()}
        files["tensors"][PERMS_FILE] = perms
    elif align == PLAIN:
        state = average([m.state_dict() for m in models])
    else:
        state, info, files = _anchored_merge(settings, given, models, data, seed, quiet)
    if merged is None:
        merged = copy.deepcopy(models[0])  # the inputs' (common) form and architecture
        merged.load_state_dict(state)
    bn_mode = resolve_bn_mode(merged, settings["bn"])
    if bn_mode == "reset":
        reset_batchnorm(merged, data.x_train)
    seconds = time.perf_counter() - start
    record = {
        **settings,
        "bn_resolved": bn_mode,
        "runs": [r.name for r in runs],
        **info,
        **evaluate_merge(merged, models, [r.name for r in runs], data, device),
        "seconds": seconds,
    }
    metrics = {
        "merge": record,
        "final_test_loss": record["merged"]["test_loss"],
        "final_test_accuracy": record["merged"]["test_accuracy"],
        "environment": environment_info(device),
        "wall_seconds": seconds,
    }
    if runs[0].metrics.get("data_paths"):  # where the runs' data were (lmc.train.runs)
        metrics["data_paths"] = runs[0].metrics["data_paths"]
    state_out = {k: v.detach().cpu() for k, v in merged.state_dict().items()}
    saved = store.save(
        config, state_out, metrics, extra_tensors=files["tensors"], extra_json=files["json"]
    )
    return _finish(record, saved.path, False, summary_dir)


def evaluate_merge(
    merged: nn.Module,
    models: Sequence[nn.Module],
    names: Sequence[str],
    data: Dataset,
    device: torch.device,
) -> dict[str, Any]:
    """Test metrics (the data's task: loss, accuracy, ECE) of every input (``inputs``, with
    its run's name), of their ensemble (the mean of their outputs) and of the ``merged``
    model."""
    x, y = data.x_test, data.y_test
    inputs, total = [], None
    for name, model in zip(names, models):
        logits = _logits(model, x, device)
        inputs.append({"run": name, **_metrics(logits, y, data.task)})
        total = logits.clone() if total is None else total.add_(logits)
    ensemble = _metrics(total / len(models), y, data.task)
    del total
    merged_metrics = _metrics(_logits(merged, x, device), y, data.task)
    return {"merged": merged_metrics, "ensemble": ensemble, "inputs": inputs}


def _finish(
    record: dict[str, Any], path: Path, reused: bool, summary_dir: str | os.PathLike | None
) -> MergedRun:
    if summary_dir is not None:
        with output_dir(summary_dir, replaces=(SUMMARY_FILE,)) as tmp:
            write_json(tmp / SUMMARY_FILE, {**record, "run_dir": str(path)})
    return MergedRun(path, record, reused)


__all__ = [
    "ALIGNMENTS_FILE",
    "ALIGNMENTS_JSON",
    "BN",
    "PERMS_FILE",
    "SUMMARY_FILE",
    "MergedRun",
    "build_run_models",
    "check_runs",
    "evaluate_merge",
    "merge_runs",
    "merge_settings",
]
