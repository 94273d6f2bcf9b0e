"""Align a stored pair and keep the result: B permuted onto A, written as a run or a weight file.

``lmc align`` is this module's argument parser: :func:`align_runs` aligns run B onto run A with a
registered method (:mod:`lmc.perm.methods`) and stores the aligned B as a new run (kind
``"aligned"``) whose config names both runs and every setting that changes the result, with the
alignment beside it (``perm.safetensors``: group -> index tensor, new unit i = old unit p[i],
when every transform is a permutation, else the :class:`lmc.perm.Alignment`'s tensors;
``perm.json`` describes it). An identical aligned run is reused. :func:`align_weight_files` does
the same for two weight files of the user's own model, writing ``FILE.safetensors`` with
``FILE.perm.safetensors`` and ``FILE.perm.json`` beside it.

>>> aligned = align_runs("runs/a", "runs/b", "weight", seed=0)
>>> aligned.path, aligned.record["objective_after"]
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lmc.config import LmcError, environment_info, resolve_device
from lmc.data import TEXT_DATASETS, Dataset, canonical_name, input_shape
from lmc.models import check_same_architecture
from lmc.models.factory import export_state
from lmc.perm import align
from lmc.perm.methods import get_method
from lmc.store import (
    Run,
    RunStore,
    check_output_place,
    jsonable,
    load_run,
    output_files,
    save_tensors,
    write_json,
)
from lmc.train.runs import load_run_data

PERM_FILE = "perm.safetensors"
SUMMARY_FILE = "perm.json"
#: the keys of an alignment's record (``AlignedRun.record``)
RECORD_KEYS = (
    "method",
    "seed",
    "objective_before",
    "objective_after",
    "moved_fraction",
    "seconds",
    "reference",
    "source",
)


@dataclass(frozen=True)
class AlignedRun:
    """What :func:`align_runs` made (or found): the aligned run's folder ``path``; its
    ``record`` (:data:`RECORD_KEYS`: the method, seed, the runs' names, the matching objective
    Σ⟨θ_A, π(θ_B)⟩ before and after, the fraction of units moved per group, seconds); the
    ``group_sizes`` (group -> units); ``reused``: an identical aligned run was already there."""

    path: Path
    record: dict[str, Any]
    group_sizes: dict[str, int]
    reused: bool


def check_alignable(method: str) -> None:
    """``LmcError`` unless ``method`` is a registered method whose aligned B loads into the
    models' own architecture (not one that aligns the canonical forms)."""
    record = get_method(method)
    if record.canonical:
        raise LmcError(
            f"method {method!r} aligns the canonical forms (LayerNorms folded into "
            "RMSNorms), whose weights do not load into the models' own architecture, so lmc "
            f"align has no aligned B to write: use lmc interpolate/analyze --align "
            f"{method}, or a study's [merge] methods"
        )


def example_input(config: Mapping[str, Any]) -> torch.Tensor:
    """Two zero rows of a run's model input (token id 0 for text), from the dataset's shape
    alone (no file read)."""
    shape = input_shape(config["dataset"], **config.get("dataset_options", {}))
    tokens = canonical_name(config["dataset"]) in TEXT_DATASETS  # token ids, not features
    return torch.zeros(2, *shape, dtype=torch.long if tokens else torch.float32)


def align_models(
    method: str,
    model_a: nn.Module,
    model_b: nn.Module,
    x_train: torch.Tensor,
    y_train: torch.Tensor | None,
    *,
    settings: Mapping[str, Any],
    seed: int,
    reference: str,
    source: str,
    task: Any = "classification",
    quiet: bool = True,
):
    """Align ``model_b`` onto ``model_a`` with ``method``: ``(result, info, record)``, the
    :class:`lmc.perm.AlignResult`, its info made JSON-ready and the record
    (:data:`RECORD_KEYS`; ``reference`` and ``source`` name A and B).

    The methods that read data (their record's ``needs_data``) get the training examples
    ``x_train`` (and the labels ``y_train`` of ``task``, where they need them); the others only
    two rows to trace the model with."""
    record_of = get_method(method)
    result = align(
        method,
        model_a,
        model_b,
        inputs=x_train if record_of.needs_data else x_train[:2],
        labels=y_train if record_of.needs_labels else None,
        task=task,
        seed=seed,
        quiet=quiet,
        **record_of.resolve(settings),
    )
    info = jsonable(result.info)
    record = {
        "method": method,
        "seed": seed,
        "reference": reference,
        "source": source,
        "objective_before": info["objective_before"],
        "objective_after": info["objective_after"],
        "moved_fraction": info["moved_fraction"],
        "seconds": info["seconds"],
    }
    return result, info, record


def _is_permutation(result) -> bool:
    return all(kind == "permutation" for kind in result.alignment.kinds.values())


def alignment_tensors(result) -> dict[str, torch.Tensor]:
    """What the alignment file holds: group -> index tensor when every transform is a
    permutation (the format ``lmc align`` has always written), else the
    :class:`lmc.perm.Alignment`'s tensors (``<group>/<field>``; described in the summary's
    ``alignment``, :meth:`lmc.perm.Alignment.from_tensors` reads both back)."""
    if _is_permutation(result):
        return dict(result.perm)
    return result.alignment.to_tensors()[0]


def alignment_summary(record: Mapping[str, Any], result) -> dict[str, Any]:
    """``perm.json``: the record, each group (size, transform kind, moved fraction, member
    tensors) and the convention of the alignment file."""
    spec, kinds = result.spec, result.alignment.kinds
    summary = {
        **record,
        "groups": {
            g: {
                "size": n,
                "kind": kinds[g],
                "moved_fraction": record["moved_fraction"].get(g),
                "members": [f"{name}[{axis}]" for name, axis in spec.groups.get(g, [])],
            }
            for g, n in spec.group_sizes.items()
        },
        "convention": "new unit i of B is old unit perm[group][i]",
    }
    if not _is_permutation(result):
        summary["alignment"] = result.alignment.to_tensors()[1]
        summary["convention"] = "the new unit coordinates of B are M @ old, per group"
    return summary


def _run(run: Run | str | os.PathLike) -> Run:
    return run if isinstance(run, Run) else load_run(run)


def _first_difference(a: Any, b: Any, where: str) -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            found = _first_difference(a.get(key), b.get(key), f"{where}.{key}")
            if found:
                return found
        return None
    return None if a == b else f"{where} is {a!r} in RUN_A but {b!r} in RUN_B"


def check_same_data(run_a: Run, run_b: Run, purpose: str = "alignment") -> None:
    """One-line ``LmcError`` naming the first difference of the two runs' datasets (their
    architectures are compared on the built models, by ``lmc.models.check_same_architecture``);
    ``purpose`` names what needs them alike."""
    for key in ("dataset", "dataset_options"):
        found = _first_difference(run_a.config.get(key), run_b.config.get(key), key)
        if found:
            raise LmcError(
                f"the runs do not match: {found}; {purpose} needs two models trained on one dataset"
            )


def align_runs(
    run_a: Run | str | os.PathLike,
    run_b: Run | str | os.PathLike,
    method: str = "weight",
    *,
    settings: Mapping[str, Any] | None = None,
    seed: int = 0,
    runs_dir: str | os.PathLike | None = None,
    device: str | torch.device = "cpu",
    data_dir: str | os.PathLike | None = None,
    download: bool = False,
    quiet: bool = True,
) -> AlignedRun:
    """Align run B onto run A with ``method`` and store the aligned B as a run (module
    docstring); an identical aligned run (same runs, method, seed and result-changing
    settings) is reused, not recomputed.

    ``settings``: the method's settings (checked by its record; defaults fill the rest);
    ``runs_dir``: the run store the aligned run goes to (default ``$LMC_RUNS`` or ``./runs``);
    ``device``: where to align; ``data_dir``/``download``: where the runs' dataset is read (the
    methods that read data only). Raises ``LmcError`` for runs of different data or
    architectures, an unknown method or setting, or a method of the canonical forms
    (:func:`check_alignable`)."""
    check_alignable(method)
    record_of = get_method(method)
    settings = record_of.resolve(settings or {})
    run_a, run_b = _run(run_a), _run(run_b)
    check_same_data(run_a, run_b)
    config = {
        "kind": "aligned",
        "dataset": run_a.config.get("dataset"),
        "dataset_options": run_a.config.get("dataset_options", {}),
        "model": run_a.config["model"],
        "model_options": run_a.config["model_options"],
        "align": {
            "method": method,
            "seed": seed,
            "reference": run_a.name,
            "source": run_b.name,
            **record_of.identity(settings),
        },
    }
    store = RunStore(runs_dir)
    existing = store.find_or_reopen(config, "aligning")
    if existing is None:
        store.check_writable()
    if existing is not None and "align" in existing.metrics:
        sizes = existing.metrics.get("group_sizes", {})
        return AlignedRun(existing.path, existing.metrics["align"], sizes, True)

    device = resolve_device(device)
    model_a, model_b = run_a.build_model(device), run_b.build_model(device)
    check_same_architecture(model_a, model_b, names=("RUN_A", "RUN_B"))
    task: Any = "classification"
    if record_of.needs_data:
        data = load_run_data(run_a, data_dir=data_dir, device=device, download=download)
        x_train, y_train, task = data.x_train, data.y_train, data.task
    else:
        x_train, y_train = example_input(run_a.config), None
    start = time.perf_counter()
    result, info, record = align_models(
        method, model_a, model_b, x_train.to(device), y_train, settings=settings, seed=seed,
        reference=run_a.name, source=run_b.name, task=task, quiet=quiet,
    )  # fmt: skip
    metrics = {
        "align": record,
        "info": info,
        "group_sizes": result.spec.group_sizes,
        "environment": environment_info(device),
        "wall_seconds": time.perf_counter() - start,
    }
    if run_a.metrics.get("data_paths"):  # where the runs' data were (lmc.train.runs)
        metrics["data_paths"] = run_a.metrics["data_paths"]
    saved = store.save(
        config,
        result.state_dict,
        metrics,
        extra_tensors={PERM_FILE: alignment_tensors(result)},
        extra_json={SUMMARY_FILE: alignment_summary(record, result)},
    )
    return AlignedRun(saved.path, record, dict(result.spec.group_sizes), False)


def perm_paths(out: str | os.PathLike) -> tuple[Path, Path]:
    """Where the alignment of an aligned weight file goes: beside it, FILE.perm.*."""
    stem = Path(out).with_suffix("")
    return Path(f"{stem}.perm.safetensors"), Path(f"{stem}.perm.json")


def check_weight_file_out(out: str | os.PathLike, inputs: tuple[Any, Any]) -> Path:
    """``out`` checked as the aligned B's weight file: ``.safetensors``, not an input, in a
    writable folder."""
    if out is None or Path(out).suffix.lower() != ".safetensors":
        raise LmcError(
            "--out FILE.safetensors is needed with --model-factory/--hf-model: the aligned B "
            f"is written as a weight file (got {out!r})"
        )
    out = Path(out)
    if out.resolve() in tuple(Path(p).resolve() for p in inputs):
        raise LmcError(f"--out {out} would overwrite an input weight file; choose another name")
    check_output_place(out.parent)
    if out.is_dir():
        raise LmcError(f"--out {out} is a folder; give a file name ending in .safetensors")
    return out


def align_weight_files(
    model_a: nn.Module,
    model_b: nn.Module,
    data: Dataset,
    out: str | os.PathLike,
    method: str = "weight",
    *,
    settings: Mapping[str, Any] | None = None,
    seed: int = 0,
    names: tuple[str, str] = ("A", "B"),
    meta: Mapping[str, Any] | None = None,
    device: str | torch.device = "cpu",
    quiet: bool = True,
) -> tuple[dict[str, Any], dict[str, int]]:
    """Align ``model_b`` onto ``model_a`` (the user's own model, loaded from two weight files
    named ``names``) on ``data``'s training split and write the aligned B to ``out``
    (``.safetensors``, in the weight files' own tensor names) with ``FILE.perm.safetensors``
    and ``FILE.perm.json`` (the summary, with ``meta`` and the settings) beside it, all three
    or none. Returns ``(record, group sizes)``."""
    check_alignable(method)
    record_of = get_method(method)
    settings = record_of.resolve(settings or {})
    out = check_weight_file_out(out, names)
    start = time.perf_counter()
    result, _, record = align_models(
        method, model_a, model_b, data.x_train, data.y_train, settings=settings, seed=seed,
        reference=str(names[0]), source=str(names[1]), task=data.task, quiet=quiet,
    )  # fmt: skip
    perm_file, summary_file = perm_paths(out)
    summary = {
        **alignment_summary(record, result),
        "settings": record_of.identity(settings),
        **{k: v for k, v in (meta or {}).items() if k not in ("weights_a", "weights_b")},
        "environment": environment_info(resolve_device(device)),
        "wall_seconds": time.perf_counter() - start,
    }
    with output_files(out.parent, [out.name, perm_file.name, summary_file.name]) as stage:
        save_tensors(stage / out.name, export_state(model_b, result.state_dict))
        save_tensors(stage / perm_file.name, alignment_tensors(result))
        write_json(stage / summary_file.name, summary)
    return record, dict(result.spec.group_sizes)


__all__ = [
    "PERM_FILE",
    "RECORD_KEYS",
    "SUMMARY_FILE",
    "AlignedRun",
    "align_models",
    "align_runs",
    "align_weight_files",
    "alignment_summary",
    "alignment_tensors",
    "check_alignable",
    "check_same_data",
    "example_input",
    "perm_paths",
]
