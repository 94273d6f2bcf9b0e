"""A study as a graph of jobs: train (one run each) -> merge (align, interpolate, analyse).

Jobs are plain dicts (JSON-able, so any executor can ship them) and the job functions are
pure functions of the job and a context; a finished job is found again and not redone:
training runs live in the run store (named by their config hash), merge results in
``<out>/jobs/<job id>.json``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmc.analysis.retention import initial_state
from lmc.config import LmcError, config_hash, resolve_device
from lmc.data import Dataset, load
from lmc.models import get_model
from lmc.store import RunStore, read_json, write_json
from lmc.train import make_config, spawn_config, train_run


@dataclass(frozen=True)
class Context:
    """Where and how jobs run (nothing here changes a result).

    ``log_dir``: when set, each training job that trains (not one reused from the store)
    writes TensorBoard events into ``log_dir/<run folder name>`` (``lmc sweep --log
    tensorboard``; see :func:`lmc.train.train_run`)."""

    runs_dir: str
    out_dir: str
    device: str = "cpu"
    data_dir: str | None = None
    download: bool = False
    quiet: bool = True
    log_dir: str | None = None

    def jobs_dir(self) -> Path:
        return Path(self.out_dir) / "jobs"

    def pairs_dir(self) -> Path:
        """Where each merge job's files (curve.csv, summary.json, layers.csv) go."""
        return Path(self.out_dir) / "pairs"


def model_options(study: dict[str, Any], width: float) -> dict[str, Any]:
    options = {k: v for k, v in study["model"].items() if k != "name"}
    options["width"] = get_model(study["model"]["name"]).width_value(width)
    return options


def train_configs(
    study: dict[str, Any], data: Dataset, width: float, weight_decay: float, pair: int
) -> tuple[dict, dict]:
    """The configs of pair ``pair``'s two models at ``width`` and ``weight_decay``.

    Independent training (``spawn_epoch`` 0): A uses seed + 2p for init and data order, B uses
    seed + 2p + 1, at ``width`` times ``sweep.width_ratio`` (default 1; B at the ratio is the
    run B of the same pair in a study of that width, so the two share it). Spawning (K > 0):
    a parent with seed + p is trained K epochs, then A and B
    continue with data seeds 1000 + seed + 2p and 1000 + seed + 2p + 1.
    """
    sweep = study["sweep"]
    recipe = {**study["train"], "weight_decay": float(weight_decay)}
    dataset, options = study["data"]["dataset"], study["data"]["options"]
    model = study["model"]["name"]

    def config(seed: int, model_width: float = width) -> dict:
        return make_config(
            dataset,
            model,
            model_options(study, model_width),
            options,
            data=data,
            init_seed=seed,
            data_seed=seed,
            **recipe,
        )

    base = sweep["seed"]
    if sweep["spawn_epoch"] == 0:
        ratio = sweep.get("width_ratio", 1)
        return config(base + 2 * pair), config(base + 2 * pair + 1, width * ratio)
    parent = config(base + pair)
    k = sweep["spawn_epoch"]
    return (
        spawn_config(parent, k, 1000 + base + 2 * pair),
        spawn_config(parent, k, 1000 + base + 2 * pair + 1),
    )


def expand(
    study: dict[str, Any], data: Dataset, earlier_methods: list[list[str]] | None = None
) -> tuple[list[dict], list[dict]]:
    """The study's train jobs and merge jobs (each merge job names its two train configs).

    Each merge job also carries ``legacy_ids``: its ids under the rule of earlier lmc versions,
    which hashed the study's ``methods`` list into every merge id, for that list and for each
    of ``earlier_methods`` (the lists earlier invocations into the same folder ran with), so
    :func:`adopt_legacy` finds their merges."""
    method_lists = [study["merge"]["methods"], *(earlier_methods or [])]
    train_jobs: dict[str, dict] = {}
    merge_jobs: list[dict] = []
    sweep = study["sweep"]
    ratio = sweep.get("width_ratio", 1)  # B's width over A's (absent from older studies)
    for weight_decay in sweep["weight_decays"]:
        for width in sweep["widths"]:
            for pair in range(sweep["pairs"]):
                config_a, config_b = train_configs(study, data, width, weight_decay, pair)
                labels = {"width": width, "weight_decay": weight_decay, "pair": pair}
                if ratio != 1:  # absent at 1: earlier job ids hold
                    labels["width_b"] = width * ratio
                for side, config in (("A", config_a), ("B", config_b)):
                    key = config_hash(config)
                    train_jobs.setdefault(
                        key,
                        {
                            "type": "train",
                            "id": key,
                            "config": config,
                            "labels": {**labels, "model": side},
                        },
                    )
                for method in study["merge"]["methods"]:
                    job = {
                        "type": "merge",
                        "run_a": config_a,
                        "run_b": config_b,
                        "method": method,
                        "split": study["data"]["split"],
                        "merge": merge_identity(study["merge"], method),
                        "analysis": study["analysis"],
                        "labels": {**labels, "method": method},
                    }
                    if ratio != 1:  # the narrow model embedded into the wide one's shape
                        job["widen"] = True
                    if study.get("stitch", {}).get("enabled"):  # absent: earlier job ids hold
                        job["stitch"] = study["stitch"]
                    # the ids before `methods` left the merge table (their merges are adopted)
                    legacy = [
                        f"merge-{config_hash({**job, 'merge': {**job['merge'], 'methods': m}})}"
                        for m in method_lists
                    ]
                    job["id"] = f"merge-{config_hash(job)}"
                    job["legacy_ids"] = list(dict.fromkeys(legacy))
                    merge_jobs.append(job)
    return list(train_jobs.values()), merge_jobs


#: The method settings' ``[merge]`` keys every merge job's id has always held, whatever its
#: method. Every other method key (``<method>_<setting>``, :mod:`lmc.perm.methods`) enters only
#: the ids of that method's merges, and there only away from its baseline: the value earlier
#: merges ran with (its record's ``legacy``, else its default), so earlier studies keep their
#: ids. Weight matching's start, restarts and solver have legacy values (identity, 1, scipy)
#: unlike their defaults (onepass, 1, auto): such merges never reuse earlier ones.
ORIGINAL_MERGE_KEYS = ("ste_steps",)


def _later_keys() -> dict[str, Any]:
    """The method keys outside :data:`ORIGINAL_MERGE_KEYS` -> (method, setting)."""
    from lmc.perm.methods import study_keys

    return {k: v for k, v in study_keys().items() if k not in ORIGINAL_MERGE_KEYS}


def _curve_defaults() -> dict[str, Any]:
    from lmc.merge import CurveSettings
    from lmc.metrics.plane import DEFAULT_PLANE_POINTS

    s = CurveSettings()
    return {
        "paths": ["line"],
        "curve_epochs": s.epochs,
        "curve_lr": s.lr,
        "curve_batch_size": s.batch_size,
        "curve_seed": s.seed,
        "curve_plane": DEFAULT_PLANE_POINTS,
    }


#: The ``[merge]`` keys of curves beside the line (issue 44) -> their defaults: ``paths``
#: (the path kinds every merge job evaluates: ``line`` and any of ``bezier``, ``chain``) and
#: how each curve's control point is trained (:class:`lmc.merge.CurveSettings`) and its plane
#: drawn. Each enters a merge job's id only when it differs from its default, so studies
#: written before curves keep their ids (:func:`merge_identity`).
CURVE_KEYS: dict[str, Any] = _curve_defaults()


def merge_identity(merge: dict[str, Any], method: str) -> dict[str, Any]:
    """The ``[merge]`` table as a merge job of ``method`` records it (and hashes it into its id):
    see :data:`ORIGINAL_MERGE_KEYS`; the curve keys (:data:`CURVE_KEYS`) only away from their
    defaults. ``methods`` (the list of the study's methods) is left
    out, so adding a method to a study reuses the other methods' merges; a merge finished
    under the earlier id, which held it, is adopted (:func:`adopt_legacy`)."""
    later = _later_keys()
    out = {}
    for key, value in merge.items():
        if key == "methods":
            continue
        if key in CURVE_KEYS and value == CURVE_KEYS[key]:
            continue  # at its default (a study without curves): its id as before curves
        if key in later:
            owner, setting = later[key]
            if owner.name != method or not setting.enters_sweep_id(value):
                continue
        out[key] = value
    return out


def describe(job: dict) -> str:
    labels = job["labels"]
    text = f"width {labels['width']:g} wd {labels['weight_decay']:g} pair {labels['pair']}"
    if job["type"] == "train":
        return f"train {text} model {labels['model']}"
    return f"merge {text} method {labels['method']}"


def adopt_legacy(job: dict, ctx: Context) -> None:
    """A merge finished under one of the job's earlier ids (``legacy_ids``: its id when the
    whole ``[merge]`` table, its ``methods`` list included, was hashed) is moved to its id now:
    its record ``OUT/jobs/<id>.json`` and its folder ``OUT/pairs/<id>``."""
    new = ctx.jobs_dir() / f"{job['id']}.json"
    if new.exists():
        return
    for legacy in job.get("legacy_ids", ()):
        old = ctx.jobs_dir() / f"{legacy}.json"
        if legacy == job["id"] or not old.exists():
            continue
        pairs_old, pairs_new = ctx.pairs_dir() / legacy, ctx.pairs_dir() / job["id"]
        if pairs_old.is_dir() and not pairs_new.exists():
            pairs_old.rename(pairs_new)
        old.rename(new)
        return


def is_done(job: dict, ctx: Context) -> bool:
    if job["type"] == "train":
        return RunStore(ctx.runs_dir).is_finished(job["config"])
    adopt_legacy(job, ctx)
    return (ctx.jobs_dir() / f"{job['id']}.json").exists()


_DATA_CACHE: dict[str, Dataset] = {}


def _dataset(config: dict, ctx: Context) -> Dataset:
    key = config_hash([config["dataset"], config.get("dataset_options", {}), ctx.device])
    if key not in _DATA_CACHE:
        _DATA_CACHE[key] = load(
            config["dataset"],
            data_dir=ctx.data_dir,
            device=ctx.device,
            download=ctx.download,
            **config.get("dataset_options", {}),
        )
    return _DATA_CACHE[key]


def run_job(job: dict, ctx: Context) -> dict[str, Any]:
    """Run one job (or find it done); return a small summary for progress reporting."""
    start = time.perf_counter()
    if job["type"] == "train":
        data = _dataset(job["config"], ctx)
        run, reused = train_run(
            job["config"],
            store=RunStore(ctx.runs_dir),
            device=resolve_device(ctx.device),
            quiet=ctx.quiet,
            data=data,
            log_dir=ctx.log_dir,
        )
        return {
            "id": job["id"],
            "reused": reused,
            "run_dir": str(run.path),
            "seconds": time.perf_counter() - start,
        }
    adopt_legacy(job, ctx)
    path = ctx.jobs_dir() / f"{job['id']}.json"
    if path.exists():
        return {"id": job["id"], "reused": True, "seconds": 0.0}
    result = merge_job(job, ctx)
    result["seconds"] = time.perf_counter() - start
    write_json(path, result)
    return {"id": job["id"], "reused": False, "seconds": result["seconds"]}


def load_job_result(job: dict, ctx: Context) -> dict[str, Any]:
    return read_json(ctx.jobs_dir() / f"{job['id']}.json")


def align_options(merge: dict[str, Any], method: str) -> dict[str, Any]:
    """``method``'s settings from a merge table (a width study's ``[merge]``, a merge-many
    study's ``[merge_many]``): a key missing from it is at its baseline (left out of the id,
    :func:`merge_identity`); a setting that changes no result and is not given is left to its
    default."""
    from lmc.perm.methods import get_method

    record = get_method(method)
    return {
        s.name: merge.get(record.study_key(s), s.baseline)
        for s in record.settings
        if record.study_key(s) in merge or s.affects_result
    }


#: ``[merge] methods`` entries that are controls, not alignments: ``random-direction`` replaces
#: the path A → B by A → A + ‖B − A‖u for a random unit direction u seeded by ``align_seed``
#: (the width paper's flatness control; ``lmc interpolate --baseline random-direction``). Its
#: rows in ``results.csv`` are that path's; it has no layerwise analysis.
CONTROLS = ("random-direction",)


def pair_settings(job: dict[str, Any]):
    """The :class:`lmc.pair.PairSettings` of a merge job: exactly what ``lmc interpolate`` /
    ``lmc analyze`` build from the same settings given as flags (a control, :data:`CONTROLS`:
    ``--baseline`` with no alignment)."""
    from lmc.pair import AnalysisOptions, PairSettings, PathSettings

    merge, analysis, method = job["merge"], job["analysis"], job["method"]
    control = method in CONTROLS
    if control:
        method = "none"
    return PairSettings(
        align=method,
        baseline=job["method"] if control else "none",
        baseline_only=control,  # its rows are the control's path: A → B is not evaluated
        align_examples=merge["align_examples"],
        align_options=align_options(merge, method),
        seed=merge["align_seed"],
        split=job["split"],
        path=PathSettings(
            lambdas=merge["lambdas"],
            bn=merge["bn"],
            seed=merge["align_seed"],
            calibrate=merge["calibrate"],
            # a job without these keys gets PathSettings' defaults
            calibration=merge.get("calibration", PathSettings.calibration),
            calibration_folds=merge.get("calibration_folds", PathSettings.calibration_folds),
            calibration_seed=merge["calibration_seed"],
        ),
        analysis=AnalysisOptions(
            lambdas=analysis["lambdas"], max_examples=analysis["max_examples"], bn=merge["bn"]
        )
        if analysis["enabled"] and not control
        else None,
        stitch=bool(job.get("stitch", {}).get("enabled", False)),
        widen=bool(job.get("widen", False)),
    )


def merge_job(job: dict, ctx: Context) -> dict[str, Any]:
    """Align (unless method ``none``), evaluate the path, analyse layer by layer (through
    :func:`lmc.pair.run_pair`); the pair's files go to ``<out>/pairs/<job id>/``."""
    from lmc.pair import run_pair, summary, write_pair

    store = RunStore(ctx.runs_dir)
    run_a, run_b = store.find(job["run_a"]), store.find(job["run_b"])
    if run_a is None or run_b is None:
        raise LmcError(f"{describe(job)}: its trained runs are missing from {ctx.runs_dir}")
    device = resolve_device(ctx.device)
    data = _dataset(run_a.config, ctx)
    model_a, model_b = run_a.build_model(device), run_b.build_model(device)
    settings = pair_settings(job)
    init_states = None
    if settings.analysis is not None:  # the retention columns of layers.csv
        init_states = (initial_state(run_a.config), initial_state(run_b.config))
    pair = run_pair(model_a, model_b, data, settings, init_states=init_states)
    out = ctx.pairs_dir() / job["id"]
    meta = {"run_a": str(run_a.path), "run_b": str(run_b.path), "labels": job["labels"]}
    write_pair(pair, out, summary(pair, {**meta, "out": str(out)}), figures=False)
    path = pair.baseline if job["method"] in CONTROLS else pair.path  # a control's own path
    result: dict[str, Any] = {
        "labels": job["labels"],
        "runs": {"a": run_a.name, "b": run_b.name},
        "endpoint_test_accuracy": [
            run_a.metrics.get("final_test_accuracy"),
            run_b.metrics.get("final_test_accuracy"),
        ],
        "endpoint_train_loss": [
            run_a.metrics.get("final_train_loss"),
            run_b.metrics.get("final_train_loss"),
        ],
        "endpoint_decay_budget": [
            run_a.metrics.get("decay_budget"),
            run_b.metrics.get("decay_budget"),
        ],
        "path": path.to_dict(),
        "barriers": path.barriers(),
        "align": pair.alignment,
    }
    if pair.stitch_errors is not None:
        result["stitch_errors"] = pair.stitch_errors
    curves = _merge_curves(job, ctx, pair, run_a, run_b, model_a, data)
    if curves:
        result["curves"] = curves
    if pair.analysis is not None:
        result["layers"] = pair.analysis.records
        if job["method"] == "none":
            result["moments"] = {
                name: {k: v.tolist() for k, v in sides.items()}
                for name, sides in pair.analysis.moments.items()
            }
            result["spectra"] = {
                name: {k: v.tolist() for k, v in sides.items()}
                for name, sides in pair.analysis.spectra.items()
            }
    return result


def curve_settings(merge: dict[str, Any], kind: str):
    """The :class:`lmc.merge.CurveSettings` of a merge job's curve of ``kind``: the
    ``curve_*`` keys of its ``[merge]`` table (absent: their defaults, :data:`CURVE_KEYS`)."""
    from lmc.merge import CurveSettings

    def get(key: str) -> Any:
        return merge.get(key, CURVE_KEYS[key])

    return CurveSettings(
        kind=kind,
        epochs=get("curve_epochs"),
        lr=get("curve_lr"),
        batch_size=get("curve_batch_size"),
        seed=get("curve_seed"),
    )


def curve_kinds(job: dict[str, Any]) -> list[str]:
    """The curves (``paths`` other than ``line``) a merge job fits beside its line: none for
    a control (:data:`CONTROLS`: its path is not A → B)."""
    if job["method"] in CONTROLS:
        return []
    return [k for k in job["merge"].get("paths", CURVE_KEYS["paths"]) if k != "line"]


def _merge_curves(job, ctx, pair, run_a, run_b, model_a, data) -> list[dict[str, Any]]:
    """Each curve of :func:`curve_kinds` fitted between the pair's (aligned) endpoints and
    evaluated like its line (:func:`lmc.pair.fit_pair_curve`); the control points are runs of
    the study's run store (reused when finished). One record per curve (its path, barriers,
    bend distance, fit history, plane)."""
    from lmc.pair.curve import fit_pair_curve, runs_description, same_architecture

    kinds = curve_kinds(job)
    if not kinds:
        return []
    store = RunStore(ctx.runs_dir)
    describe = same_architecture(pair, model_a, runs_description(run_a, run_b))
    plane = job["merge"].get("curve_plane", CURVE_KEYS["curve_plane"])
    records = []
    for kind in kinds:
        curve = fit_pair_curve(
            pair, data, curve_settings(job["merge"], kind), plane=plane or None, store=store,
            describe=describe, quiet=ctx.quiet,
        )  # fmt: skip
        record = curve.record()
        record["plane"] = curve.plane.to_dict() if curve.plane is not None else None
        records.append(record)
    return records
