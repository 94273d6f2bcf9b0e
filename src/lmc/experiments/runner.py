"""Run a study: expand it into jobs, run what is not done yet, write the tidy results."""

from __future__ import annotations

import datetime as dt
import sys
import time
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from lmc.config import LmcError, environment_info
from lmc.data import load
from lmc.store import (
    RunStore,
    default_runs_dir,
    made_folder,
    output_files,
    write_json,
    write_text,
)

from .cells import read_csv
from .executors import Executor, LocalExecutor
from .jobs import Context, describe, expand, is_done, load_job_result
from .kinds import DEFAULT_KIND, experiment_of, get_kind
from .results import OPTIONAL_RESULTS, write_csv, write_results

#: The record of a study with variants, in its output folder (its variants in subfolders).
VARIANTS_FILE = "variants.json"


def now_utc() -> str:
    """The time now, UTC, ISO 8601 to the second (what ``study.json`` records)."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def run_study(
    study: dict[str, Any],
    out_dir: str | Path,
    *,
    executor: Executor | None = None,
    runs_dir: str | Path | None = None,
    device: str = "cpu",
    data_dir: str | None = None,
    download: bool = False,
    quiet: bool = False,
    toml_text: str | None = None,
    log_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Run ``study`` (a resolved study, see :mod:`lmc.experiments.study`) into ``out_dir``.

    Finished training runs (in the run store) and finished merge jobs (in ``out_dir/jobs``)
    are reused, so an interrupted study resumes where it stopped and a larger grid only runs
    what is new. Returns the contents of ``study.json``. ``log_dir``: TensorBoard events of
    every model the study trains go to ``log_dir/<run folder name>`` (none for reused runs).

    Output places are checked before any work: ``out_dir`` (and the run store, when a run is
    to be trained) must be writable folders (:func:`lmc.store.check_output_place`). A failure
    leaves nothing behind in a folder this call made, unless merge jobs finished there (kept,
    so a re-run resumes); the tidy results files replace earlier ones as one unit.
    """
    out = Path(out_dir)
    options = dict(
        executor=executor,
        runs_dir=runs_dir,
        device=device,
        data_dir=data_dir,
        download=download,
        quiet=quiet,
        log_dir=None if log_dir is None else str(Path(log_dir).absolute()),
    )
    kind = experiment_of(study)
    if kind != DEFAULT_KIND:  # another kind of experiment runs itself
        return get_kind(kind).run(study, out, toml_text=toml_text, **options)
    if "variants" in study:
        return _run_variants(study, out, toml_text=toml_text, **options)
    with made_folder(out, keep=holds_finished_jobs):
        return _run_study(study, out, toml_text=toml_text, **options)


def holds_finished_jobs(out: Path) -> bool:
    """Whether ``out/jobs`` holds a finished job's record (a failed run keeps the folder)."""
    jobs = out / "jobs"
    return jobs.is_dir() and any(p.suffix == ".json" for p in jobs.iterdir())


def _run_variants(
    study: dict[str, Any], out: Path, *, toml_text: str | None, **options: Any
) -> dict[str, Any]:
    """Run each variant of ``study`` (:mod:`lmc.experiments.variants`) into ``out/<variant>``,
    then write ``variants.json`` and ``variants.csv`` (every variant's Table 1 rows)."""
    from .variants import variant_rows

    variants = study["variants"]

    def keep(path: Path) -> bool:
        return any(holds_finished_jobs(path / v["name"]) for v in variants)

    with made_folder(out, keep=keep):
        started, wall = now_utc(), time.perf_counter()
        records = []
        for i, variant in enumerate(variants, start=1):
            if not options["quiet"]:
                print(f"variant {i}/{len(variants)}: {variant['name']}", file=sys.stderr)
            records.append(run_study(variant["study"], out / variant["name"], **options))
        tables = [read_csv(out / v["name"] / "table1.csv") for v in variants]
        keys = sorted({k for v in variants for k in v["changed"]})
        write_csv(out / "variants.csv", variant_rows(variants, tables), ["variant", *keys])
        if toml_text is not None:
            write_text(out / "study.toml", toml_text)
        record = {
            "name": study["name"],
            "description": study["description"],
            "variants": [
                {"name": v["name"], "folder": v["name"], "changed": v["changed"]} for v in variants
            ],
            "started": started,
            "finished": now_utc(),
            "wall_seconds": time.perf_counter() - wall,
            "jobs": {
                key: sum(r["jobs"][key] for r in records) for key in ("total", "reused", "run")
            },
            "status": "finished",
        }
        write_json(out / VARIANTS_FILE, record)
        return record


def job_context(
    out: Path,
    *,
    executor: Executor | None,
    runs_dir: str | Path | None,
    device: str,
    data_dir: str | None,
    download: bool,
    quiet: bool,
    log_dir: str | None,
) -> tuple[Executor, Context]:
    """The executor (default: a local pool) and the jobs' :class:`Context` of a study run into
    ``out``; with several workers the jobs' own progress lines are off (they would interleave)."""
    executor = executor or LocalExecutor()
    ctx = Context(
        runs_dir=str(runs_dir or default_runs_dir()),
        out_dir=str(out),
        device=device,
        data_dir=data_dir,
        download=download,
        quiet=quiet or getattr(executor, "workers", 2) > 1,
        log_dir=log_dir,
    )
    return executor, ctx


def _run_study(
    study: dict[str, Any],
    out: Path,
    *,
    executor: Executor | None,
    runs_dir: str | Path | None,
    device: str,
    data_dir: str | None,
    download: bool,
    quiet: bool,
    toml_text: str | None,
    log_dir: str | None,
) -> dict[str, Any]:
    executor, ctx = job_context(
        out,
        executor=executor,
        runs_dir=runs_dir,
        device=device,
        data_dir=data_dir,
        download=download,
        quiet=quiet,
        log_dir=log_dir,
    )
    workers = getattr(executor, "workers", 2)
    started, wall = now_utc(), time.perf_counter()
    data = load(
        study["data"]["dataset"], data_dir=data_dir, download=download, **study["data"]["options"]
    )
    train_jobs, merge_jobs = expand(study, data)
    del data
    if toml_text is not None:
        write_text(out / "study.toml", toml_text)
    record: dict[str, Any] = {
        "name": study["name"],
        "description": study["description"],
        "config": study,
        "environment": environment_info(device),
        "executor": executor.name,
        "workers": workers,
        "threads_per_job": getattr(executor, "threads", 1),
        "runs_dir": ctx.runs_dir,
        "started": started,
    }
    write_json(out / "study.json", {**record, "status": "running"})

    counts = {"total": len(train_jobs) + len(merge_jobs), "reused": 0, "run": 0}
    bar = tqdm(
        total=counts["total"],
        desc="sweep",
        unit="job",
        file=sys.stderr,
        disable=quiet,
        dynamic_ncols=True,
    )
    failures: list[str] = []
    for phase in (train_jobs, merge_jobs):
        pending = []
        for job in phase:
            if job["type"] == "merge" and any(f.startswith(_pair_key(job)) for f in failures):
                bar.update(1)
                continue
            if is_done(job, ctx):
                counts["reused"] += 1
                bar.update(1)
            else:
                pending.append(job)
        if any(job["type"] == "train" for job in pending):
            RunStore(ctx.runs_dir).check_writable()
        for job, summary, error in executor.map(pending, ctx):
            bar.update(1)
            if error is not None:
                failures.append(f"{_pair_key(job)} {describe(job)}: {error}")
                if not quiet:  # the error raised at the end names the first failure
                    bar.write(f"failed: {describe(job)}: {error}", file=sys.stderr)
                continue
            counts["reused" if summary.get("reused") else "run"] += 1
            if not quiet:
                bar.write(
                    f"done: {describe(job)} ({summary['seconds']:.1f} s"
                    f"{', reused' if summary.get('reused') else ''})",
                    file=sys.stderr,
                )
    bar.close()
    if failures:
        write_json(out / "study.json", {**record, "status": "failed", "failures": failures})
        raise LmcError(
            f"{len(failures)} job(s) failed; the first: {failures[0]} "
            "(fix it and re-run: finished jobs are kept)"
        )
    results = [load_job_result(job, ctx) for job in merge_jobs]
    with output_files(out, None) as stage:  # the results files replace earlier ones together
        files = {k: out / Path(v).name for k, v in write_results(stage, study, results).items()}
    for name in set(OPTIONAL_RESULTS) - {p.name for p in files.values()}:
        (out / name).unlink(missing_ok=True)  # an earlier run's, which this one did not make
    record.update(
        {
            "status": "finished",
            "finished": now_utc(),
            "wall_seconds": time.perf_counter() - wall,
            "jobs": counts,
            "files": {k: str(v.name) for k, v in files.items()},
        }
    )
    write_json(out / "study.json", record)
    return record


def _pair_key(job: dict) -> str:
    labels = job["labels"]
    return f"[{labels['width']}|{labels['weight_decay']}|{labels['pair']}]"
