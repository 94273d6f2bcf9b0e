"""Merging N models as a study: ``experiment = "merge-many"`` (Git Re-Basin §5.4, App. A.10).

Each ``[[sets]]`` entry is a group of models of one architecture trained on chosen training
data; every set is merged (``methods``: ``none`` averages the weights as they are, ``weight``
is Git Re-Basin's merge-many, :func:`lmc.merge.merge_many_iterative`: every model aligned to
the mean of the others, round after round, until no permutation changes; a method that aligns
canonical forms, e.g. ``orthogonal`` or ``learned`` for pre-LN transformers, merges them beyond
permutations, every model aligned onto model 0's canonical form,
:func:`lmc.merge.many.merge_many_canonical`, and ``canonical`` is its control) and the merge is
compared with each model, the models' ensemble and, with ``reference = true``, one model
trained on the whole training split, in test loss (nats; per token for next-token data),
accuracy and expected calibration error (ECE, ``ece_bins`` equal-width bins;
:func:`lmc.metrics.classification_metrics`). The ensemble averages the models' logits, as the
path's ensemble does (docs/science.md). The same study covers Git Re-Basin's three merging
experiments:

- merging many (App. A.10, Table 3): ``subset = "all"``, several models of different seeds;
- merging models trained on random halves (Fig. 13): ``subset = "random"``,
  ``train_fraction = 0.5`` (model i draws its own subset with ``subset_seed = seed + i``);
- split-data merging (§5.4, Figs. 5, 10-11): ``subset = "labels"``, ``label_parts`` one list
  of per-label fractions per model (A: 20% of labels 0-4 and 80% of labels 5-9, B the
  reverse), disjoint subsets cut from one seeded order (``lmc.data.subsets``).

Model i of a set trains with init and data seed ``seed + i`` (the set's own ``seed`` where it
gives one: sets that differ only in it are independent repeats); the reference with
``seed + 1000``. Runs live in the run store (reused by any study with the same settings); a
finished set's evaluation is kept in ``OUT/jobs/merge-many-<hash>.json`` and reused.

Files: ``models.csv`` (one row per set and evaluated model: ``role`` = model / ensemble /
merged / reference, ``method`` for merges, ``index`` for models, ``run``, ``test_loss``,
``test_accuracy``, ``test_ece``, ``rounds`` / ``converged`` for ``weight`` merges),
``reliability.csv`` (per set, evaluated model and confidence bin: ``lower``, ``upper``,
``count``, ``confidence``, ``accuracy``; empty bins have empty cells), ``study.json``.
"""

from __future__ import annotations

import sys
from functools import partial
from typing import Any

import torch

from lmc.config import LmcError, config_hash
from lmc.data import load
from lmc.store import RunStore
from lmc.train import make_config

from .executors import RunOptions
from .jobs import Context, describe, is_done
from .kind_run import StudyRecord, load_data, reuse_or_run, write_tables
from .merge_many_settings import (
    KIND,
    OWN_METHODS,
    REFERENCE_SEED,
    method_identity,
    method_options,
)

MODEL_COLUMNS = [
    "set",
    "role",
    "method",
    "index",
    "run",
    "test_loss",
    "test_accuracy",
    "test_ece",
    "rounds",
    "converged",
    "train_examples",
]
RELIABILITY_COLUMNS = ["set", "label", "bin", "lower", "upper", "count", "confidence", "accuracy"]
#: The result tables (:mod:`lmc.experiments.kind_run`): key -> (file, leading columns).
OUTPUTS = {
    "models": ("models.csv", MODEL_COLUMNS),
    "reliability": ("reliability.csv", RELIABILITY_COLUMNS),
}


# ---- jobs -------------------------------------------------------------------------------------
def set_seed(study: dict, entry: dict) -> int:
    """The seed a set's models count from: its own ``seed``, else the study's."""
    return entry.get("seed", study["merge_many"]["seed"])


def _dataset_options(study: dict, entry: dict, index: int, n_train: int) -> dict[str, Any]:
    options = dict(study["data"]["options"])
    seed = set_seed(study, entry)
    if entry["subset"] == "random":
        from lmc.data.subsets import subset_count

        options.update(
            train_size=max(1, subset_count(entry["train_fraction"], n_train)),
            subset_seed=seed + index,
        )
    elif entry["subset"] == "labels":
        options.update(label_parts=entry["label_parts"], label_part=index, subset_seed=seed)
    return options


def _config(study: dict, options: dict, seed: int, data) -> dict[str, Any]:
    from .jobs import model_options

    settings = study["merge_many"]
    return make_config(
        study["data"]["dataset"],
        study["model"]["name"],
        model_options(study, settings["width"]),
        options,
        data=data,
        init_seed=seed,
        data_seed=seed,
        weight_decay=float(settings["weight_decay"]),
        **study["train"],
    )


def _train_job(config: dict, study: dict, group: str, index: int) -> dict[str, Any]:
    labels = {
        "width": study["merge_many"]["width"],
        "weight_decay": study["merge_many"]["weight_decay"],
        "pair": index,
        "model": group,
    }
    return {"type": "train", "id": config_hash(config), "config": config, "labels": labels}


def expand_merge_many(study: dict, data) -> tuple[list[dict], list[dict]]:
    """The study's train jobs and one evaluation job per set (each naming its configs)."""
    n_train = len(data.y_train)
    seed = study["merge_many"]["seed"]
    train: dict[str, dict] = {}
    reference = None
    if study["merge_many"]["reference"]:
        reference = _config(study, dict(study["data"]["options"]), seed + REFERENCE_SEED, data)
        train[config_hash(reference)] = _train_job(reference, study, "reference", 0)
    sets = []
    for entry in study["sets"]:
        configs, sizes = [], []
        for i in range(entry["models"]):
            options = _dataset_options(study, entry, i, n_train)
            config = _config(study, options, set_seed(study, entry) + i, data)
            train.setdefault(config_hash(config), _train_job(config, study, entry["name"], i))
            configs.append(config)
            sizes.append(_train_examples(data, options))
        settings = study["merge_many"]
        job = {
            "type": KIND,
            "set": entry,
            "configs": configs,
            "train_examples": sizes,
            "reference": reference,
            "split": study["data"]["split"],
            **{k: settings[k] for k in ("methods", "ece_bins", "max_rounds", "bn", "seed")},
        }
        canonical = [m for m in settings["methods"] if m not in OWN_METHODS]
        if canonical:  # absent otherwise, so that earlier studies keep their job ids
            job["align_examples"] = settings["align_examples"]
            job["given"] = {m: method_identity(settings, m) for m in canonical}
        job["id"] = f"{KIND}-{config_hash(job)}"
        if canonical:  # every setting the merge runs with, outside the id
            job["options"] = {m: method_options(settings, m) for m in canonical}
        sets.append(job)
    return list(train.values()), sets


def _train_examples(data, options: dict[str, Any]) -> int:
    """How many training examples a model with dataset ``options`` sees (``data``: the
    whole dataset), counted without drawing the subset."""
    from lmc.data.subsets import label_counts, subset_count

    if "train_size" in options:
        return int(options["train_size"])
    if "label_parts" in options:
        counts = label_counts(data.y_train, data.num_classes)
        row = options["label_parts"][options["label_part"]]
        return sum(subset_count(f, n) for f, n in zip(row, counts))
    return len(data.y_train)


# ---- evaluation -------------------------------------------------------------------------------
@torch.no_grad()
def _logits(model: torch.nn.Module, x: torch.Tensor, device: torch.device) -> torch.Tensor:
    from lmc.metrics import model_logits
    from lmc.models import eval_mode

    with eval_mode(model):
        return model_logits(model, x, 1024, device)


def _reliability(
    label: str, logits: torch.Tensor, y: torch.Tensor, bins: int, task: Any = "classification"
) -> list[dict]:
    from lmc.metrics import reliability_curve

    curve = reliability_curve(logits, y, bins, kind="logits", task=task)
    return [
        {
            "label": label,
            "bin": b,
            "lower": float(curve.edges[b]),
            "upper": float(curve.edges[b + 1]),
            "count": int(curve.counts[b]),
            "confidence": float(curve.confidence[b]),
            "accuracy": float(curve.accuracy[b]),
        }
        for b in range(curve.bins)
    ]


def _merge_canonical(
    job: dict, method: str, models: list, ctx: Context, device: torch.device
) -> torch.nn.Module:
    """The merged model (a canonical-form one): the set's models merged beyond permutations by
    canonical ``method`` (:func:`lmc.merge.many.merge_many_canonical`, anchored on model 0), the
    alignment examples drawn with the study's seed from the models' training data (their shared
    subset for a set of subset "all", else the whole training split)."""
    from lmc.merge.many import merge_many_canonical
    from lmc.pair.pipeline import alignment_examples
    from lmc.perm.methods import get_method

    config = job["configs"][0]
    options = dict(config.get("dataset_options", {}))
    if job["set"]["subset"] != "all":
        options = {k: v for k, v in options.items() if k not in _SUBSET_OPTIONS}
    data = load(config["dataset"], data_dir=ctx.data_dir, download=ctx.download, device=device,
                **options)  # fmt: skip
    record = get_method(method)
    x, y = alignment_examples(data, job["align_examples"] if record.needs_data else 2, job["seed"])
    result = merge_many_canonical(
        models, method, inputs=x, labels=y if record.needs_labels else None, task=data.task,
        seed=job["seed"], **record.resolve(job["options"][method]),
    )  # fmt: skip
    return result.model


_SUBSET_OPTIONS = ("train_size", "subset_seed", "label_parts", "label_part")


def evaluate_set(job: dict, ctx: Context) -> dict[str, Any]:
    """Merge one set's models by each method and evaluate them, the ensemble and the
    reference on the study's split with the data's task; the JSON-ready record of the job."""
    from lmc.config import resolve_device
    from lmc.merge import average, merge_many_iterative, reset_batchnorm, resolve_bn_mode
    from lmc.metrics import classification_metrics

    store = RunStore(ctx.runs_dir)
    runs = [store.find(config) for config in job["configs"]]
    if any(run is None for run in runs):
        raise LmcError(
            f"set {job['set']['name']}: its trained runs are missing from {ctx.runs_dir}"
        )
    device = resolve_device(ctx.device)
    config = job["configs"][0]
    base = {k: v for k, v in config.get("dataset_options", {}).items() if k not in _SUBSET_OPTIONS}
    data = load(
        config["dataset"], data_dir=ctx.data_dir, download=ctx.download, device=device, **base
    )
    x, y = data.split(job["split"])
    bins = job["ece_bins"]
    models = [run.build_model(device) for run in runs]
    rows: list[dict[str, Any]] = []
    curves: list[dict[str, Any]] = []

    def record(row: dict[str, Any], label: str, logits: torch.Tensor) -> None:
        metrics = classification_metrics(logits, y, bins, task=data.task)
        rows.append({**row, **{f"test_{k}": v for k, v in metrics.items()}})
        curves.extend(_reliability(label, logits, y, bins, data.task))

    all_logits = []
    for i, (run, model) in enumerate(zip(runs, models)):
        logits = _logits(model, x, device)
        all_logits.append(logits)
        row = {
            "role": "model",
            "index": i,
            "run": run.name,
            "train_examples": job["train_examples"][i],
        }
        record(row, f"model {i}", logits)
    record({"role": "ensemble"}, "ensemble", torch.stack(all_logits).mean(0))
    for method in job["methods"]:
        info: dict[str, Any] = {}
        if method not in OWN_METHODS:
            merged_model = _merge_canonical(job, method, models, ctx, device)
            record(
                {"role": "merged", "method": method},
                f"merged ({method})",
                _logits(merged_model, x, device),
            )
            continue
        if method == "weight":
            merged = merge_many_iterative(
                models,
                example_input=data.x_train[:2],
                seed=job["seed"],
                max_rounds=job["max_rounds"],
            )
            state, info = merged.state, {"rounds": merged.rounds, "converged": merged.converged}
        else:
            state = average([m.state_dict() for m in models])
        model = runs[0].build_model(device)
        model.load_state_dict(state)
        if resolve_bn_mode(model, job["bn"]) == "reset":
            reset_batchnorm(model, data.x_train, seed=job["seed"])
        record(
            {"role": "merged", "method": method, **info},
            f"merged ({method})",
            _logits(model, x, device),
        )
    if job["reference"] is not None:
        run = store.find(job["reference"])
        if run is None:
            raise LmcError(f"the reference run is missing from {ctx.runs_dir}")
        record(
            {"role": "reference", "run": run.name, "train_examples": len(data.y_train)},
            "reference",
            _logits(run.build_model(device), x, device),
        )
    return {"id": job["id"], "set": job["set"]["name"], "models": rows, "reliability": curves}


def run_merge_many(study: dict[str, Any], options: RunOptions) -> dict[str, Any]:
    """Train what the run store lacks, evaluate every set not evaluated yet, write the files
    (module docstring); returns the contents of ``study.json``."""
    out, ctx, executor = options.out, options.job_context(), options.executor
    record = StudyRecord(
        study, options, options.device, executor=executor.name, runs_dir=ctx.runs_dir
    )
    data = load_data(study, options)
    train_jobs, set_jobs = expand_merge_many(study, data)
    del data
    record.running()
    counts = {"total": len(train_jobs) + len(set_jobs), "reused": 0, "run": 0}
    pending = []
    for job in train_jobs:
        if is_done(job, ctx):
            counts["reused"] += 1
        else:
            pending.append(job)
    if pending:
        RunStore(ctx.runs_dir).check_writable()
    for job, summary, error in executor.map(pending, ctx):
        if error is not None:
            record.failed([f"{describe(job)}: {error}"])
            raise LmcError(
                f"{describe(job)} failed: {error} (fix it and re-run: finished runs are kept)"
            )
        counts["reused" if summary.get("reused") else "run"] += 1
        _say(options.quiet, f"done: {describe(job)} ({summary['seconds']:.1f} s)")
    results = []
    for job in set_jobs:
        result, reused = reuse_or_run(out, job["id"], job, partial(evaluate_set, job, ctx))
        results.append(result)
        counts["reused" if reused else "run"] += 1
        if not reused:
            _say(options.quiet, f"done: set {job['set']['name']} ({result['seconds']:.1f} s)")
    files = write_tables(
        out,
        OUTPUTS,
        {
            "models": [{"set": r["set"], **row} for r in results for row in r["models"]],
            "reliability": [{"set": r["set"], **row} for r in results for row in r["reliability"]],
        },
    )
    return record.finished(counts, files)


def _say(quiet: bool, text: str) -> None:
    if not quiet:
        print(text, file=sys.stderr, flush=True)
